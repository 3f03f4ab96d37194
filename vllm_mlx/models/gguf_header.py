"""Read a GGUF file's architecture and tensor types without decoding its metadata values.

``gguf.GGUFReader`` decodes every metadata value into numpy views, which takes ~8 s on the
default model's 49k-token vocabulary and 49k merges; the importer needs only the architecture
and each tensor's type before MLX reads the file, so this walks the header and skips values.
Type and value-kind names come from the ``gguf`` package's enums (llama.cpp's own).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from gguf import GGMLQuantizationType, GGUFValueType

from vllm_mlx.models.errors import ModelLoadError

_MAGIC = b"GGUF"
_SCALAR_SIZES = {
    GGUFValueType.UINT8: 1,
    GGUFValueType.INT8: 1,
    GGUFValueType.BOOL: 1,
    GGUFValueType.UINT16: 2,
    GGUFValueType.INT16: 2,
    GGUFValueType.UINT32: 4,
    GGUFValueType.INT32: 4,
    GGUFValueType.FLOAT32: 4,
    GGUFValueType.UINT64: 8,
    GGUFValueType.INT64: 8,
    GGUFValueType.FLOAT64: 8,
}


@dataclass(frozen=True)
class GGUFHeader:
    """What the importer needs to know before reading any tensor data."""

    architecture: str | None
    tensor_types: dict[str, str]  # tensor name -> GGML type name, e.g. "Q4_1"


class _Cursor:
    """Little-endian reads over a memory-mapped file."""

    def __init__(self, buffer: mmap.mmap) -> None:
        self.buffer = buffer
        self.offset = 0

    def unpack(self, fmt: str) -> int:
        (value,) = struct.unpack_from("<" + fmt, self.buffer, self.offset)
        self.offset += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        length = self.unpack("Q")
        raw = self.buffer[self.offset : self.offset + length]
        self.offset += length
        return raw.decode("utf-8", errors="replace")

    def skip_value(self, kind: GGUFValueType) -> None:
        if kind == GGUFValueType.STRING:
            length = self.unpack("Q")
            self.offset += length
        elif kind == GGUFValueType.ARRAY:
            item_kind = GGUFValueType(self.unpack("I"))
            count = self.unpack("Q")
            if item_kind in _SCALAR_SIZES:
                self.offset += count * _SCALAR_SIZES[item_kind]
            else:
                for _ in range(count):
                    self.skip_value(item_kind)
        else:
            self.offset += _SCALAR_SIZES[kind]


def read_gguf_header(path: Path) -> GGUFHeader:
    """Parse the header of ``path``; a file that is not GGUF raises ModelLoadError."""
    try:
        with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as m:
            if m[:4] != _MAGIC:
                raise ModelLoadError(f"{path} is not a readable GGUF file: bad magic {m[:4]!r}")
            cursor = _Cursor(m)
            cursor.offset = 4
            version = cursor.unpack("I")
            if version < 2:
                raise ModelLoadError(f"{path} is GGUF version {version}; need version 2 or 3")
            tensor_count = cursor.unpack("Q")
            kv_count = cursor.unpack("Q")
            architecture = None
            for _ in range(kv_count):
                key = cursor.string()
                kind = GGUFValueType(cursor.unpack("I"))
                if key == "general.architecture" and kind == GGUFValueType.STRING:
                    architecture = cursor.string()
                else:
                    cursor.skip_value(kind)
            tensor_types = {}
            for _ in range(tensor_count):
                name = cursor.string()
                dimensions = cursor.unpack("I")
                cursor.offset += 8 * dimensions
                type_id = cursor.unpack("I")
                cursor.offset += 8  # data offset
                try:
                    tensor_types[name] = GGMLQuantizationType(type_id).name
                except ValueError:
                    tensor_types[name] = f"unknown type {type_id}"
    except ModelLoadError:
        raise
    except (OSError, ValueError, struct.error, KeyError) as error:
        raise ModelLoadError(f"{path} is not a readable GGUF file: {error}") from error
    return GGUFHeader(architecture=architecture, tensor_types=tensor_types)
