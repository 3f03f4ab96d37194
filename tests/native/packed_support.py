"""What the packed-product tests share: the marks that skip them where the packed body
cannot run, and the process's packed mode put back after a test changes it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from vllm_mlx import native

MARKS = [
    pytest.mark.default_activations,  # the int16 products
    pytest.mark.skipif(not native.available(), reason="vllm_mlx.native is not built"),
    pytest.mark.skipif(
        not (native.available() and native.set_int16_body("vnni")),
        reason="the packed products need AVX-512 VNNI",
    ),
]


@contextmanager
def restored_packed_mode() -> Iterator[None]:
    before = native.packed_mode()
    try:
        yield
    finally:
        native.set_packed_mode(before)
