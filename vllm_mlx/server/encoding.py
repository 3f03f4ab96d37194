"""Compressed request bodies (``Content-Encoding: gzip | zstd``; Codex sends zstd).

The decoded body is bounded by the same ``--max-body-mb`` as a plain one, and read only up
to one byte past it, so a decompression bomb costs at most that much memory before its 413.
"""

from __future__ import annotations

import gzip
import io
import zlib
from typing import Any

import zstandard

ENCODINGS = ("gzip", "zstd")


class BodyEncodingError(Exception):
    """A body that cannot be decoded: ``status`` 413 (too large), 415 (unknown), 400."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def decompressed(raw: bytes, encoding: str | None, max_bytes: int) -> bytes:
    """``raw`` decoded per its ``Content-Encoding`` (none or ``identity``: as it is)."""
    name = (encoding or "identity").strip().lower()
    if name == "identity":
        return raw
    if name not in ENCODINGS:
        raise BodyEncodingError(415, f"unsupported Content-Encoding {encoding!r}; use gzip or zstd")
    try:
        stream: Any
        if name == "gzip":
            stream = gzip.GzipFile(fileobj=io.BytesIO(raw))
        else:
            stream = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw))
        with stream:
            body = stream.read(max_bytes + 1)
    except (OSError, EOFError, zlib.error, zstandard.ZstdError) as exc:
        raise BodyEncodingError(400, f"request body is not valid {name}: {exc}") from None
    if len(body) > max_bytes:
        raise BodyEncodingError(413, f"decoded request body exceeds {max_bytes} bytes")
    return body
