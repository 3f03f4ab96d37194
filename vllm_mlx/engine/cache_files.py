"""Prefix-cache entries on disk, so a restart does not re-process a long system prompt.

One safetensors file per entry under ``DIR/<namespace>/``; the namespace hashes the model's
weights (a sample of every tensor), its tokenizer and the KV settings, so a different model
never even lists another's files. A file is written to a temporary name, synced and renamed,
so a crash leaves either the whole file or none; every tensor carries a CRC32 that is checked
on load, and a file that fails any check is deleted and never loaded (the request that missed
recomputes the prefix and writes it again). The directory is bounded: least recently used
files go first. Writes run on a background thread from host copies taken at store time.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import json
import logging
import os
import queue
import struct
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.models.cache import ArraysCache, KVCache
from safetensors.numpy import load_file, save

from ..protocols import LayerCache, Tokenizer
from .kv_quant import QuantizedKV
from .vision import ShiftedKVCache

log = logging.getLogger(__name__)

FORMAT = 1
_META = "vllm_mlx_prefix"
# ShiftedKVCache: a vision model's rows (their rotary shift is set again at admission)
_CLASSES = {c.__name__: c for c in (KVCache, QuantizedKV, ArraysCache, ShiftedKVCache)}
_MAX_PENDING = 4  # writes waiting; beyond it new entries are not persisted


def _leaves(tree: Any) -> list[tuple[str, Any]]:
    """``tree_flatten``'s (path, leaf) pairs, typed as such (it returns a dict only when
    given a ``destination`` dict)."""
    return cast(list[tuple[str, Any]], tree_flatten(tree))


def cache_namespace(model: Any, tokenizer: Tokenizer, **settings: Any) -> str:
    """A hash of what a cached KV depends on: weights, tokenizer, KV settings."""
    digest = hashlib.sha256(json.dumps([FORMAT, settings], sort_keys=True).encode())
    for name, value in _leaves(model.parameters()):
        digest.update(f"{name}{value.shape}{value.dtype}".encode())
        digest.update(_host(value.reshape(-1)[:64]).tobytes())
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    digest.update(json.dumps(sorted(vocab.items()), ensure_ascii=False).encode())
    digest.update(repr(sorted(getattr(tokenizer, "eos_token_ids", []) or [])).encode())
    return digest.hexdigest()[:24]


def _host(array: mx.array) -> np.ndarray:
    """A numpy copy (bfloat16, which numpy lacks, as its uint16 bits)."""
    if array.dtype == mx.bfloat16:
        array = array.view(mx.uint16)
    return np.array(array)


@dataclass
class DiskEntry:
    path: Path
    tokens: np.ndarray
    trimmable: bool
    nbytes: int


class DiskCache:
    def __init__(self, root: str | Path, namespace: str, max_bytes: int, min_tokens: int = 256):
        self.dir = Path(root) / namespace
        self.dir.mkdir(parents=True, exist_ok=True)
        self.namespace = namespace
        self.max_bytes = max_bytes
        self.min_tokens = min_tokens
        self.entries: dict[Path, DiskEntry] = {}
        self._lock = threading.Lock()
        self._writes: queue.Queue = queue.Queue()
        self._scan()
        threading.Thread(target=self._write_loop, name="vllm-mlx-cache-files", daemon=True).start()
        atexit.register(self.flush)  # the server flushes on shutdown; this covers the Python API

    # -- index -----------------------------------------------------------------------------

    def _scan(self) -> None:
        for path in self.dir.glob("*.tmp"):
            path.unlink(missing_ok=True)  # a write that never finished
        for path in self.dir.glob("*.safetensors"):
            meta = _read_meta(path)
            if meta is None or meta.get("namespace") != self.namespace:
                log.warning("prefix cache file %s is unreadable; deleting it", path.name)
                path.unlink(missing_ok=True)
                continue
            tokens = _decode_tokens(meta["tokens"])
            self.entries[path] = DiskEntry(path, tokens, meta["trimmable"], path.stat().st_size)

    def candidates(self) -> list[DiskEntry]:
        with self._lock:
            return list(self.entries.values())

    # -- loading ---------------------------------------------------------------------------

    def load(self, entry: DiskEntry) -> list[LayerCache] | None:
        """The entry's cache, or None (and the file deleted) when any check fails."""
        try:
            cache = _load(entry.path, self.namespace, entry.tokens)
        except Exception as exc:  # corrupted, truncated, or from another format: rebuild
            log.warning("prefix cache file %s failed its checks (%s); deleting it", entry.path, exc)
            self._forget(entry.path)
            return None
        os.utime(entry.path)  # recently used: evicted last
        return cache

    def _forget(self, path: Path) -> None:
        with self._lock:
            self.entries.pop(path, None)
        path.unlink(missing_ok=True)

    # -- writing ---------------------------------------------------------------------------

    def save(self, tokens: list[int], cache: list[LayerCache], trimmable: bool) -> None:
        """Persist an evaluated entry (host copies now, the file on the writer thread)."""
        if len(tokens) < self.min_tokens or self._writes.qsize() >= _MAX_PENDING:
            return
        if any(type(c).__name__ not in _CLASSES for c in cache):
            return  # a cache kind this format cannot rebuild (e.g. nested lists)
        token_array = np.asarray(tokens, dtype=np.int32)
        tensors, layers = {}, []
        for i, layer in enumerate(cache):
            scalars, dtypes = {}, {}
            for key, value in _leaves(layer.state):
                if isinstance(value, mx.array):
                    tensors[f"{i}.{key}"] = _host(value)
                    dtypes[key] = str(value.dtype).removeprefix("mlx.core.")
                else:
                    scalars[key] = value
            layers.append({"class": type(layer).__name__, "scalars": scalars, "dtypes": dtypes})
        meta = {
            "format": FORMAT,
            "namespace": self.namespace,
            "tokens": base64.b64encode(token_array.tobytes()).decode(),
            "trimmable": trimmable,
            "layers": layers,
            "crc": {name: zlib.crc32(array.tobytes()) for name, array in tensors.items()},
        }
        name = hashlib.sha256(token_array.tobytes()).hexdigest()[:32]
        self._writes.put((self.dir / f"{name}.safetensors", tensors, meta, token_array))

    def flush(self) -> None:
        """Wait until every queued write is on disk."""
        self._writes.join()

    def _write_loop(self) -> None:
        while True:
            path, tensors, meta, tokens = self._writes.get()
            try:
                self._write(path, tensors, meta, tokens)
            except Exception:
                log.exception("could not write prefix cache file %s", path)
            finally:
                self._writes.task_done()

    def _write(self, path: Path, tensors: dict, meta: dict, tokens: np.ndarray) -> None:
        data = save(tensors or {"empty": np.zeros(0, np.int8)}, {_META: json.dumps(meta)})
        temp = path.with_suffix(".tmp")
        with open(temp, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
        entry = DiskEntry(path, tokens, meta["trimmable"], len(data))
        with self._lock:
            self.entries[path] = entry
            covered = [
                e.path
                for e in self.entries.values()
                if entry.trimmable and e.path != path and _is_prefix(e.tokens, tokens)
            ]
        for old in covered:  # a trimmable longer entry serves every prefix of itself
            self._forget(old)
        self._evict()

    def _evict(self) -> None:
        with self._lock:
            entries = sorted(self.entries.values(), key=lambda e: _mtime(e.path))
            total = sum(e.nbytes for e in entries)
        while entries and total > self.max_bytes:
            oldest = entries.pop(0)
            total -= oldest.nbytes
            self._forget(oldest.path)


def _is_prefix(short: np.ndarray, long: np.ndarray) -> bool:
    return len(short) <= len(long) and bool(np.array_equal(long[: len(short)], short))


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _decode_tokens(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype=np.int32)


def _read_meta(path: Path) -> dict | None:
    """Our metadata from the safetensors header alone (the tensors are not read)."""
    try:
        with open(path, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        meta = json.loads(header["__metadata__"][_META])
        return meta if meta.get("format") == FORMAT else None
    except (OSError, ValueError, KeyError, struct.error, TypeError):
        return None


def _load(path: Path, namespace: str, tokens: np.ndarray) -> list[LayerCache]:
    meta = _read_meta(path)
    if meta is None or meta["namespace"] != namespace:
        raise ValueError("foreign or unreadable header")
    if not np.array_equal(_decode_tokens(meta["tokens"]), tokens):
        raise ValueError("tokens changed since the index was read")
    arrays = load_file(path)
    if set(arrays) - {"empty"} != set(meta["crc"]):
        raise ValueError("tensor list does not match the header")
    for name, crc in meta["crc"].items():
        if zlib.crc32(arrays[name].tobytes()) != crc:
            raise ValueError(f"checksum mismatch in {name}")
    cache = []
    for i, layer in enumerate(meta["layers"]):
        leaves = [(k, v) for k, v in layer["scalars"].items()]
        for key, dtype in layer["dtypes"].items():
            value = mx.array(arrays[f"{i}.{key}"])
            leaves.append((key, value.view(mx.bfloat16) if dtype == "bfloat16" else value))
        leaves.sort(key=lambda kv: [int(p) if p.isdigit() else p for p in kv[0].split(".")])
        cache.append(_CLASSES[layer["class"]].from_state(tree_unflatten(leaves)))
    return cache
