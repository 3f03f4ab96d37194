"""Compressed request bodies over real HTTP: gzip and zstd (Codex's) decode to the same
request; an unknown encoding is a 415, a corrupt one a 400, and a decompression bomb hits
the body limit (413) without being inflated past it."""

from __future__ import annotations

import gzip
import json

import httpx
import pytest
import zstandard
from servers import replay_server

BODY = json.dumps({"model": "m", "input": "Hi", "max_output_tokens": 5}).encode()


@pytest.fixture(scope="module")
def base():
    with replay_server("Hello.") as (url, _):
        yield url


def post(base: str, data: bytes, encoding: str) -> httpx.Response:
    headers = {"Content-Type": "application/json", "Content-Encoding": encoding}
    return httpx.post(f"{base}/v1/responses", content=data, headers=headers, timeout=30)


@pytest.mark.parametrize(
    "encoding,encode",
    [("gzip", gzip.compress), ("zstd", zstandard.ZstdCompressor().compress)],
)
def test_compressed_bodies_are_decoded(base, encoding, encode):
    reply = post(base, encode(BODY), encoding)
    assert reply.status_code == 200, reply.text
    assert reply.json()["output"][0]["content"][0]["text"] == "Hello."


def test_unknown_and_corrupt_encodings(base):
    assert post(base, BODY, "br").status_code == 415
    corrupt = post(base, b"\x28\xb5\x2f\xfdnot zstd", "zstd")
    assert corrupt.status_code == 400 and corrupt.json()["error"]["type"] == "invalid_request_error"


def test_a_decompression_bomb_hits_the_body_limit(base):
    bomb = zstandard.ZstdCompressor().compress(b"{" + b" " * (17 * 1024 * 1024) + b"}")
    assert len(bomb) < 64 * 1024
    reply = post(base, bomb, "zstd")
    assert reply.status_code == 413 and "exceeds" in reply.json()["error"]["message"]
