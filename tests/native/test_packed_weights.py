"""The packed copies' cache (``csrc/packed_weights.cpp``): a copy lives as long as its
weights' buffers, so dropping a model's arrays frees it, and new arrays that MLX's
allocator puts at a freed copy's addresses are packed afresh, never given the old copy."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import mlx.core as mx
import numpy as np
import pytest
from packed_support import MARKS, restored_packed_mode

from vllm_mlx import native

pytestmark = MARKS


@pytest.fixture
def mode() -> Iterator[None]:
    with restored_packed_mode():
        yield


def weights(seed: int) -> list[np.ndarray]:
    mx.random.seed(seed)
    return [np.array(a) for a in mx.quantize(mx.random.normal((40, 64)), group_size=32, bits=4)]


def address(a: mx.array) -> int:
    return int(np.array(a, copy=False).__array_interface__["data"][0])


def product(x: mx.array, w: list[mx.array]) -> np.ndarray:
    return np.array(native.quantized_matmul(x, *w, 32, 4))


def test_a_copy_is_freed_with_its_weights(mode: None) -> None:
    assert native.set_packed(True)
    gc.collect()
    entries, filled = native.packed_count()
    w = [mx.array(a) for a in weights(1)]
    product(mx.random.normal((3, 64)), w)
    assert native.packed_count() == (
        entries + 1,
        filled + 16 * 64 * 4 // 8 * 3 + 2 * 3 * 16 * 2 * 4,
    )
    del w
    assert native.packed_count() == (entries, filled)


def test_registered_weights_run_packed_under_auto_and_are_freed_with_them(mode: None) -> None:
    assert native.set_packed_mode("auto")
    x = mx.random.normal((3, 64))
    w = [mx.array(a) for a in weights(2)]
    unregistered = product(x, w)
    mx.eval(w)
    entries = native.packed_count()[0]
    native.register_packed(*w, 32, 4)
    assert native.packed_count()[0] == entries + 1
    registered = product(x, w)
    assert native.set_packed(True)
    assert np.array_equal(registered, product(x, [mx.array(a) for a in weights(2)]))
    assert not np.array_equal(registered, unregistered)  # the packed body ran
    assert native.set_packed(False)
    assert np.array_equal(unregistered, product(x, w))  # "0": no copy is read
    del w
    assert native.packed_count()[0] == entries


def test_new_weights_at_a_freed_copys_addresses_are_packed_afresh(mode: None) -> None:
    assert native.set_packed(True)
    x = mx.random.normal((5, 64))
    mx.eval(x)
    old, new = weights(3), weights(4)
    w, scales, biases = (mx.array(a) for a in old)
    mx.eval(w, scales, biases)
    at = [address(a) for a in (w, scales, biases)]
    old_out = product(x, [w, scales, biases])
    del w, scales, biases
    # new arrays (any valid weights: the scales and biases share a size, so whichever
    # lands where) until some sit at all three freed addresses
    candidates = [mx.array(new[0]) for _ in range(4)]
    candidates += [mx.array(new[1 + i % 2]) for i in range(8)]
    mx.eval(candidates)
    by_address = {address(a): a for a in candidates}
    if not all(a in by_address for a in at):
        pytest.skip("MLX's allocator did not hand the freed buffers back")
    again = [by_address[a] for a in at]
    out = product(x, again)
    fresh = product(
        x, [mx.array(np.array(a)) for a in again]
    )  # other buffers: a packing of its own
    assert np.array_equal(out, fresh)
    assert not np.array_equal(out, old_out)
