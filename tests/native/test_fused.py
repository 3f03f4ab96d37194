"""The fused per-layer primitives (RMSNorm, RoPE, the MLP block, the attention input)
against MLX's own ops, over random shapes, on every instruction set this CPU has."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_kernels import SETTINGS, assert_close

from vllm_mlx import native

pytestmark = pytest.mark.skipif(not native.available(), reason="vllm_mlx.native is not built")


def quantized(n: int, k: int, group_size: int, bits: int, key: mx.array):
    return mx.quantize(0.1 * mx.random.normal((n, k), key=key), group_size, bits)


def reference_matmul(x, triple, group_size: int, bits: int) -> mx.array:
    return mx.quantized_matmul(x, *triple, transpose=True, group_size=group_size, bits=bits)


@given(
    lead=st.sampled_from([(1,), (3,), (1, 1), (2, 7)]),
    dim=st.integers(1, 700),
    eps=st.sampled_from([1e-6, 1e-5]),
    seed=st.integers(0, 2**31 - 1),
)
@SETTINGS
def test_rms_norm_matches_mlx(lead, dim, eps, seed) -> None:
    kx, kw = mx.random.split(mx.random.key(seed))
    x, w = 3 * mx.random.normal((*lead, dim), key=kx), mx.random.normal((dim,), key=kw)
    assert_close(native.rms_norm(x, w, eps), mx.fast.rms_norm(x, w, eps), rtol=1e-6)


def test_rms_norm_reads_strided_inputs() -> None:
    x = mx.random.normal((64, 5), key=mx.random.key(3)).T  # a transposed view
    w = mx.random.normal((64,), key=mx.random.key(4))
    assert_close(native.rms_norm(x, w, 1e-5), mx.fast.rms_norm(x, w, 1e-5), rtol=1e-6)


@given(
    b=st.integers(1, 2),
    heads=st.integers(1, 9),
    length=st.integers(1, 9),
    head_dim=st.sampled_from([16, 64, 80, 128]),
    partial=st.booleans(),
    traditional=st.booleans(),
    base=st.sampled_from([10000.0, 100000.0, 500000.0]),
    scale=st.sampled_from([1.0, 0.25]),
    offset=st.sampled_from([0, 1, 37, 2000, 8000]),
    transposed=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
@SETTINGS
def test_rope_matches_mlx(
    b, heads, length, head_dim, partial, traditional, base, scale, offset, transposed, seed
) -> None:
    dims = head_dim // 2 if partial else head_dim
    if transposed:  # what mlx-lm passes: [B, L, H, D] projections viewed as [B, H, L, D]
        x = mx.random.normal((b, length, heads, head_dim), key=mx.random.key(seed))
        x = x.transpose(0, 2, 1, 3)
    else:
        x = mx.random.normal((b, heads, length, head_dim), key=mx.random.key(seed))
    want = mx.fast.rope(x, dims, traditional=traditional, base=base, scale=scale, offset=offset)
    got = native.rope(x, native.rope_inv_freq(dims, base), dims, traditional, scale, offset)
    assert_close(got, want, rtol=1e-6)


@given(
    b=st.integers(1, 4),
    length=st.integers(1, 6),
    traditional=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
    data=st.data(),
)
@SETTINGS
def test_rope_with_per_sequence_offsets_matches_mlx(b, length, traditional, seed, data) -> None:
    offsets = mx.array(data.draw(st.lists(st.integers(-8, 3000), min_size=b, max_size=b)))
    x = mx.random.normal((b, length, 3, 64), key=mx.random.key(seed)).transpose(0, 2, 1, 3)
    want = mx.fast.rope(x, 64, traditional=traditional, base=1e4, scale=1.0, offset=offsets)
    freqs = native.rope_inv_freq(64, 1e4)
    assert_close(native.rope_offsets(x, freqs, offsets, 64, traditional, 1.0), want, rtol=1e-6)


def swiglu_mlp(h, norm_w, eps, gate, up, down, group_size, bits) -> mx.array:
    """mlx-lm's Llama MLP block on MLX's own ops."""
    n = mx.fast.rms_norm(h, norm_w, eps)
    g = reference_matmul(n, gate, group_size, bits)
    u = reference_matmul(n, up, group_size, bits)
    return h + reference_matmul(g * mx.sigmoid(g) * u, down, group_size, bits)


@given(
    bits=st.sampled_from([4, 8]),
    group_size=st.sampled_from([32, 64, 128]),
    width=st.integers(1, 5),
    hidden=st.integers(1, 6),
    rows=st.sampled_from([(1, 1), (1, 3), (2, 1), (1, 8)]),
    seed=st.integers(0, 2**31 - 1),
)
@SETTINGS
def test_mlp_block_matches_mlx(isa, bits, group_size, width, hidden, rows, seed) -> None:
    dim, inner = group_size * width, group_size * hidden
    keys = mx.random.split(mx.random.key(seed), 5)
    h = mx.random.normal((*rows, dim), key=keys[0])
    norm_w = 1 + 0.1 * mx.random.normal((dim,), key=keys[1])
    gate = quantized(inner, dim, group_size, bits, keys[2])
    up = quantized(inner, dim, group_size, bits, keys[3])
    down = quantized(dim, inner, group_size, bits, keys[4])
    want = swiglu_mlp(h, norm_w, 1e-5, gate, up, down, group_size, bits)
    got = native.mlp_block(h, norm_w, 1e-5, gate, up, down, group_size, bits)
    assert_close(got, want)


def attention_input_reference(x, norm_w, eps, q, k, v, group_size, bits, heads, rope, offset):
    """mlx-lm's Llama attention up to the cache: norm, projections, heads, RoPE."""
    (n_heads, n_kv), (dims, traditional, base, scale) = heads, rope
    B, L, _ = x.shape
    n = mx.fast.rms_norm(x, norm_w, eps)

    def split(t, count):
        return t.reshape(B, L, count, -1).transpose(0, 2, 1, 3)

    def rotate(t):
        return mx.fast.rope(t, dims, traditional=traditional, base=base, scale=scale, offset=offset)

    queries = split(reference_matmul(n, q, group_size, bits), n_heads)
    keys = split(reference_matmul(n, k, group_size, bits), n_kv)
    values = split(reference_matmul(n, v, group_size, bits), n_kv)
    return rotate(queries), rotate(keys), values


@given(
    bits=st.sampled_from([4, 8]),
    group_size=st.sampled_from([32, 64]),
    n_kv=st.integers(1, 3),
    group=st.integers(1, 3),
    head_dim=st.sampled_from([32, 64]),
    width=st.integers(1, 4),
    shape=st.sampled_from([(1, 1), (1, 5), (2, 1), (2, 3)]),
    traditional=st.booleans(),
    offset=st.sampled_from([0, 9, 1500]),
    seed=st.integers(0, 2**31 - 1),
)
@SETTINGS
def test_attention_input_matches_mlx(
    isa, bits, group_size, n_kv, group, head_dim, width, shape, traditional, offset, seed
) -> None:
    dim, n_heads = group_size * width, n_kv * group
    keys = mx.random.split(mx.random.key(seed), 5)
    x = mx.random.normal((*shape, dim), key=keys[0])
    norm_w = 1 + 0.1 * mx.random.normal((dim,), key=keys[1])
    q = quantized(n_heads * head_dim, dim, group_size, bits, keys[2])
    k = quantized(n_kv * head_dim, dim, group_size, bits, keys[3])
    v = quantized(n_kv * head_dim, dim, group_size, bits, keys[4])
    rope = (head_dim, traditional, 10000.0, 1.0)
    want = attention_input_reference(
        x, norm_w, 1e-5, q, k, v, group_size, bits, (n_heads, n_kv), rope, offset
    )
    got = native.attention_input(
        x, norm_w, 1e-5, q, k, v, group_size, bits, (n_heads, n_kv),
        native.rope_inv_freq(head_dim, 10000.0), (head_dim, traditional, 1.0), offset,
    )  # fmt: skip
    for g, w in zip(got, want, strict=True):
        assert_close(g, w)


def test_fused_primitives_reject_what_they_do_not_cover() -> None:
    w = mx.ones((8,))
    with pytest.raises(ValueError, match="weight"):
        native.rms_norm(mx.zeros((2, 9)), w, 1e-5)
    with pytest.raises(ValueError, match="float32"):
        native.rms_norm(mx.zeros((2, 8), dtype=mx.float16), w, 1e-5)
    freqs = native.rope_inv_freq(8, 10000.0)
    with pytest.raises(ValueError, match="inv_freq"):
        native.rope(mx.zeros((1, 1, 1, 16)), freqs, 16, False, 1.0, 0)
    with pytest.raises(ValueError, match="B, H, L, D"):
        native.rope(mx.zeros((1, 8)), freqs, 8, False, 1.0, 0)
    gate = up = mx.quantize(mx.zeros((64, 64)), 32, 4)
    down = mx.quantize(mx.zeros((32, 64)), 32, 4)
    with pytest.raises(ValueError, match="width"):
        native.mlp_block(mx.zeros((1, 64)), mx.ones((64,)), 1e-5, gate, up, down, 32, 4)
    with pytest.raises(ValueError, match="n_heads"):
        native.attention_input(
            mx.zeros((1, 1, 64)), mx.ones((64,)), 1e-5, gate, down, down, 32, 4, (3, 1),
            freqs, (8, False, 1.0), 0,
        )  # fmt: skip
    assert np.isfinite(np.array(native.rms_norm(mx.zeros((1, 8)), w, 1e-5))).all()
