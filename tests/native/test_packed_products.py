"""The packed int16 products (``VLLM_MLX_NATIVE_PACKED=1``: weights repacked so a vector's
lanes are 16 weight rows, AVX-512 VNNI): each output is one float chain over its groups,
so every row of a product of any number of rows, and of a model's batched decode step,
equals the one-row product's bits; and the outputs keep the int16 bound against MLX's
float op, for every layout a decode step reads (4/8 bits, group sizes 32-128, float32
and float16 scales, row counts that leave a ragged last tile)."""

from __future__ import annotations

from collections.abc import Iterator

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import make_prompt_cache
from packed_support import MARKS, restored_packed_mode
from test_kernels import int_bound
from test_patch import quantized_llama

from vllm_mlx import native
from vllm_mlx.native import patch

pytestmark = MARKS


@pytest.fixture
def packed() -> Iterator[None]:
    with restored_packed_mode():
        assert native.set_packed(True)
        yield


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize(("group_size", "k"), [(32, 576), (32, 160), (64, 1536), (128, 384)])
@pytest.mark.parametrize("half_scales", [False, True])
def test_each_row_of_a_packed_product_is_its_one_row_product_within_the_bound(
    packed: None, bits: int, group_size: int, k: int, half_scales: bool
) -> None:
    mx.random.seed(bits * 1000 + k)
    w, scales, biases = mx.quantize(mx.random.normal((203, k)), group_size=group_size, bits=bits)
    full = (scales, biases)
    if half_scales:
        scales, biases = scales.astype(mx.float16), biases.astype(mx.float16)
        full = (scales.astype(mx.float32), biases.astype(mx.float32))
    x = mx.random.normal((65, k)) * mx.random.uniform(0.01, 10.0, (65, 1))
    ref = np.array(
        mx.quantized_matmul(x, w, *full, transpose=True, group_size=group_size, bits=bits)
    )
    alone = [
        np.array(native.quantized_matmul(x[m : m + 1], w, scales, biases, group_size, bits))[0]
        for m in range(65)
    ]
    for m in range(65):
        bound = int_bound(np.array(x[m]), w, full[0], group_size, bits)
        slack = 2e-5 * (1 + np.abs(ref[m]).max())
        assert (np.abs(alone[m] - ref[m]) <= bound + slack).all(), m
    for rows in (*range(2, 10), 65):
        block = np.array(native.quantized_matmul(x[:rows], w, scales, biases, group_size, bits))
        for m in range(rows):
            assert np.array_equal(block[m], alone[m]), (rows, m)


def test_the_switch_turns_the_packed_products_on_and_off(packed: None) -> None:
    """Also: weights computed in the same graph as their first packed product (not yet
    there when the product is planned) are packed once they are."""
    assert native.packed_mode() == native.status()["packed"] == "1"
    mx.random.seed(3)
    w, scales, biases = mx.quantize(mx.random.normal((40, 64)), group_size=32, bits=4)
    x = mx.random.normal((3, 64))
    on = np.array(native.quantized_matmul(x, w, scales, biases, 32, 4))
    native.set_packed(False)
    off = np.array(native.quantized_matmul(x, w, scales, biases, 32, 4))
    assert native.packed_mode() == "0"
    assert not np.array_equal(on, off)  # another float order: the switch took effect
    np.testing.assert_allclose(on, off, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("rows", [2, 5, 8])
def test_a_packed_decode_row_is_the_same_in_any_batch(packed: None, rows: int) -> None:
    model = quantized_llama(4, 32, seed=rows)
    patch.enable(model)
    mx.random.seed(rows)
    tokens = mx.random.randint(1, 250, (rows, 9))
    batch_cache = make_prompt_cache(model)
    model(tokens[:, :-1], cache=batch_cache)
    batch = model(tokens[:, -1:], cache=batch_cache)
    for r in range(rows):
        cache = make_prompt_cache(model)
        model(tokens[r : r + 1, :-1], cache=cache)
        one = model(tokens[r : r + 1, -1:], cache=cache)
        assert np.array_equal(np.array(batch[r : r + 1]), np.array(one)), r
    native.set_packed(False)
    cache = make_prompt_cache(model)
    model(tokens[:1, :-1], cache=cache)
    unpacked = model(tokens[:1, -1:], cache=cache)
    assert not np.array_equal(np.array(unpacked), np.array(batch[:1]))  # the packed path ran
