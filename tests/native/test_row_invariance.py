"""A row's numbers do not depend on the block it is computed in: each row of a prompt
block's product, attention and layer equals the one-row (decode) call's bits, alone or in
a left-padded batch, on the default switches (int16 products, float16 KV caches)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from vllm_mlx import native

pytestmark = [
    pytest.mark.default_activations,  # the int16 products a server runs
    pytest.mark.skipif(not native.available(), reason="vllm_mlx.native is not built"),
]


def same_bits(a: mx.array, b: mx.array) -> bool:
    return np.array_equal(np.array(a), np.array(b))


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group_size", [32, 64, 128])
@pytest.mark.parametrize("half_scales", [False, True])
def test_every_row_of_a_product_is_the_one_row_product(
    isa: str, bits: int, group_size: int, half_scales: bool
) -> None:
    mx.random.seed(bits + group_size)
    w, scales, biases = mx.quantize(mx.random.normal((200, 256)), group_size=group_size, bits=bits)
    if half_scales:
        scales, biases = scales.astype(mx.float16), biases.astype(mx.float16)
    x = mx.random.normal((130, 256))
    for rows in (2, 8, 9, 64, 65, 130):
        block = native.quantized_matmul(x[:rows], w, scales, biases, group_size, bits)
        for m in sorted({0, rows // 2, rows - 1}):
            one = native.quantized_matmul(x[m : m + 1], w, scales, biases, group_size, bits)
            assert same_bits(block[m : m + 1], one), (rows, m)


def test_every_row_of_an_mlp_block_is_the_one_row_block() -> None:
    mx.random.seed(3)
    proj = [mx.quantize(mx.random.normal(s) * 0.1, 64, 4) for s in ((512, 128), (512, 128))]
    down = mx.quantize(mx.random.normal((128, 512)) * 0.1, 64, 4)
    norm = mx.random.uniform(0.5, 1.5, (128,))
    h = mx.random.normal((1, 100, 128))
    block = native.mlp_block(h, norm, 1e-5, proj[0], proj[1], down, 64, 4)
    for m in (0, 9, 99):
        one = native.mlp_block(h[:, m : m + 1], norm, 1e-5, proj[0], proj[1], down, 64, 4)
        assert same_bits(block[:, m : m + 1], one), m


def _qkv(lk: int, dtype: mx.Dtype, seed: int):
    mx.random.seed(seed)
    q = mx.random.normal((1, 6, lk, 64))
    k = mx.random.normal((1, 2, lk, 64)).astype(dtype)
    v = mx.random.normal((1, 2, lk, 64)).astype(dtype)
    return q, k, v


@pytest.mark.parametrize("dtype", [mx.float16, mx.float32])
def test_every_query_row_of_a_causal_block_is_its_decode_row(isa: str, dtype: mx.Dtype) -> None:
    """Rows past one key block (256 keys) see several blocks; a decode step at that
    position sees the same ones."""
    lk = 600
    q, k, v = _qkv(lk, dtype, seed=1)
    for lq in (3, 9, 300):
        block = native.attention(q[:, :, lk - lq :], k, v, 0.125, True)
        for i in sorted({0, 1, lq // 2, lq - 1}):
            at = lk - lq + i
            one = native.attention(
                q[:, :, at : at + 1], k[:, :, : at + 1], v[:, :, : at + 1], 0.125
            )
            assert same_bits(block[:, :, i : i + 1], one), (lq, i)


@pytest.mark.parametrize("lq", [1, 5, 40])
def test_a_left_padded_sequence_gets_its_own_rows(isa: str, lq: int) -> None:
    """In a batch, behind padding whose keys hold anything, next to a longer neighbour: the
    mask mlx-lm's batched cache makes (padding and causal) gives the rows alone's bits."""
    lk, pad = 300, 37
    q, k, v = _qkv(lk, mx.float16, seed=2)
    alone = native.attention(q[:, :, lk - lq :], k, v, 0.125, True)
    noise = [mx.random.normal((1, h, pad, 64)) * 100 for h in (6, 2, 2)]
    padded = [
        mx.concatenate([n.astype(a.dtype), a], axis=2)
        for n, a in zip(noise, (q, k, v), strict=True)
    ]
    queries, keys, values = (
        mx.concatenate([a, mx.random.normal(a.shape).astype(a.dtype)]) for a in padded
    )  # the neighbour: batch row 1, with no padding
    batch = (queries[:, :, -lq:], keys, values)
    positions = mx.arange(lk + pad)
    rows = mx.arange(lk + pad - lq, lk + pad)
    causal = positions[None, :] <= rows[:, None]
    mask = mx.stack([causal & (positions >= pad)[None, :], causal])[:, None]
    got = native.attention_masked(*batch, 0.125, mask)
    assert same_bits(got[:1], alone)
