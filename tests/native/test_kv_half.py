"""Float16 KV caches on the native path: the attention kernels read half keys and values
exactly as MLX reads their float32 values, the rounding stays within its documented bound
of the unrounded float32 attention, float32 rows are rounded as MLX's astype rounds them,
and every other reader (prefill matmuls, MLX's SDPA fallback) upcasts."""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mlx_lm.models import llama
from test_kernels import SETTINGS, assert_close, attention_cases
from test_patch import quantized_llama
from test_prefill import prefill_cases

from vllm_mlx import native
from vllm_mlx.native import patch
from vllm_mlx.native.layers import KV_ENV, kv_dtype, kv_namespace, routed_attention

pytestmark = pytest.mark.skipif(not native.available(), reason="vllm_mlx.native is not built")
HALF_ULP = 2.0**-11  # float16's relative rounding error (round to nearest)
HALF_SUBNORMAL = 2.0**-25  # its absolute error below 2^-14


def half_kv(case) -> tuple[mx.array, mx.array, mx.array, float, bool]:
    b, heads, kv_heads, q_len, k_len, dim, causal, seed = case
    kq, kk, kv = mx.random.split(mx.random.key(seed), 3)
    q = mx.random.normal((b, heads, q_len, dim), key=kq)
    k = 2 * mx.random.normal((b, kv_heads, k_len, dim), key=kk)  # peaky softmax
    v = mx.random.normal((b, kv_heads, k_len, dim), key=kv)
    return q, k, v, dim**-0.5, causal


def upcast(a: mx.array) -> mx.array:
    return a.astype(mx.float16).astype(mx.float32)


@pytest.mark.usefixtures("float_attention")
@given(case=attention_cases())
@SETTINGS
def test_attention_reads_half_kv_as_mlx_reads_its_float32_values(isa, case) -> None:
    q, k, v, scale, causal = half_kv(case)
    mask = "causal" if causal else None
    want = mx.fast.scaled_dot_product_attention(q, upcast(k), upcast(v), scale=scale, mask=mask)
    got = native.attention(q, k.astype(mx.float16), v.astype(mx.float16), scale, causal)
    assert_close(got, want, rtol=1e-5)


@pytest.mark.usefixtures("float_attention")
@given(case=attention_cases(), keep=st.floats(0.2, 0.9))
@SETTINGS
def test_masked_attention_reads_half_kv(isa, case, keep) -> None:
    q, k, v, scale, _ = half_kv(case)
    b, heads, q_len, k_len = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    key = mx.random.key(case[-1] + 1)
    mask = (mx.random.uniform(shape=(b, heads, q_len, k_len), key=key) < keep) | (
        mx.arange(k_len) == k_len - 1
    )
    want = mx.fast.scaled_dot_product_attention(q, upcast(k), upcast(v), scale=scale, mask=mask)
    got = native.attention_masked(q, k.astype(mx.float16), v.astype(mx.float16), scale, mask)
    assert_close(got, want, rtol=1e-5)


@pytest.mark.usefixtures("float_attention")
def test_attention_reads_a_half_cache_view(isa) -> None:
    """A float16 KVCache's slice of a larger buffer; a non-contiguous last axis too."""
    buffer = mx.random.normal((2, 1, 3, 512, 64), key=mx.random.key(4)).astype(mx.float16)
    k, v = buffer[0][..., :300, :], buffer[1][..., :300, :]
    q = mx.random.normal((1, 1, 9, 64), key=mx.random.key(6)).transpose(0, 2, 1, 3)
    want = mx.fast.scaled_dot_product_attention(q, upcast(k), upcast(v), scale=0.125)
    assert_close(native.attention(q, k, v, 0.125), want, rtol=1e-5)
    kt = mx.random.normal((1, 3, 64, 300), key=mx.random.key(7)).astype(mx.float16)
    kt = kt.swapaxes(-1, -2)  # the strided generic body
    want = mx.fast.scaled_dot_product_attention(q, upcast(kt), upcast(v), scale=0.125)
    assert_close(native.attention(q, kt, v, 0.125), want, rtol=1e-5)


@given(case=attention_cases())
@SETTINGS
def test_half_kv_stays_within_its_bound_of_float32_attention(isa, case) -> None:
    """k' = k(1 + d), |d| <= 2^-11 (plus 2^-25 below 2^-14), moves each score by at most
    e = scale * sum |q| (2^-11 |k| + 2^-25), so each softmax weight by a factor within
    exp(+-2e), and the output o = sum p v by at most
    (exp(2 e_max) - 1)(1 + 2^-11) max|v| + 2^-11 max|v| + 2^-25 per element."""
    q, k, v, scale, causal = half_kv(case)
    exact = np.array(native.attention(q, k, v, scale, causal))
    got = np.array(native.attention(q, k.astype(mx.float16), v.astype(mx.float16), scale, causal))
    qn, kn, vn = np.abs(np.array(q)), np.abs(np.array(k)), np.abs(np.array(v))
    group = q.shape[1] // k.shape[1]
    kn, vn = np.repeat(kn, group, axis=1), np.repeat(vn, group, axis=1)
    shift = scale * np.einsum("bhqd,bhkd->bhqk", qn, HALF_ULP * kn + HALF_SUBNORMAL)
    e = shift.max(axis=-1, keepdims=True)  # over keys (masked ones only loosen it)
    v_max = vn.max(axis=2, keepdims=True)  # per head and feature, over keys
    bound = np.expm1(2 * e) * (1 + HALF_ULP) * v_max + HALF_ULP * v_max + HALF_SUBNORMAL
    slack = 1e-5 * (1 + np.abs(exact).max())  # float32 sums in another order
    assert (np.abs(got - exact) <= bound + slack).all()
    # and the bound is not vacuous here: a few percent of the values' size at most
    assert math.isfinite(float(bound.max())) and float(bound.max()) < 0.1 * float(v_max.max())


def test_kv_write_rounds_float32_rows_as_mlx_astype() -> None:
    """Every kind of float32 (random bit patterns: normals, subnormals, inf, nan; ties,
    the overflow edge 65520, half subnormals) rounds to the half MLX's astype gives."""
    rng = np.random.default_rng(0)
    random_bits = rng.integers(0, 2**32, size=1 << 16, dtype=np.uint64).astype(np.uint32)
    edges = [0.0, -0.0, 65504, 65519.996, 65520, -65520, np.inf, -np.inf, 1e-45, 1e-8]
    edges += [2**-24, 2**-25, 3 * 2**-25, 2**-14, 2**-14 * (1 - 2**-11), 1 + 2**-11, 1 + 3 * 2**-11]
    normals = rng.normal(size=4096).astype(np.float32)
    values = np.concatenate([np.array(edges, np.float32), random_bits.view(np.float32), normals])
    n = values.size // 64 * 64
    rows = mx.array(values[:n].reshape(1, 1, 1, n // 64, 64))
    cache = mx.zeros((1, n // 64, 3, 64), mx.float16)
    got = np.array(native.kv_write(cache, rows, 0, 0, 1)[:, :, 1, :]).reshape(-1)
    want = np.array(mx.array(values[:n]).astype(mx.float16))
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all()
    assert (got[~nan].view(np.uint16) == want[~nan].view(np.uint16)).all()


@SETTINGS
@given(case=prefill_cases(), seed=st.integers(0, 2**16))
def test_prefill_attention_upcasts_half_kv(isa, case, seed: int) -> None:
    B, Hq, Hkv, L, Lk, D, causal = case
    q, k, v, scale, _ = half_kv((B, Hq, Hkv, L, Lk, D, causal, seed))
    mask = "causal" if causal else None
    want = mx.fast.scaled_dot_product_attention(q, upcast(k), upcast(v), scale=scale, mask=mask)
    got = patch.prefill_attention(q, k.astype(mx.float16), v.astype(mx.float16), scale, causal)
    assert_close(got, want)


def test_mlx_fallback_gets_kv_in_the_queries_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the kernels leave to MLX's SDPA (here an additive float mask) sees float32
    keys and values, not the float16 cache's."""
    patch.enable(quantized_llama(4, 32))  # wraps the module's scaled_dot_product_attention
    seen: list[tuple[mx.Dtype, mx.Dtype]] = []
    inner = mx.fast.scaled_dot_product_attention
    monkeypatch.setattr(
        mx.fast,
        "scaled_dot_product_attention",
        lambda q, k, v, **kw: seen.append((k.dtype, v.dtype)) or inner(q, k, v, **kw),
    )
    q = mx.random.normal((1, 4, 3, 16), key=mx.random.key(1))
    k = mx.random.normal((1, 2, 5, 16), key=mx.random.key(2)).astype(mx.float16)
    v = mx.random.normal((1, 2, 5, 16), key=mx.random.key(3)).astype(mx.float16)
    mask = mx.random.normal((1, 1, 3, 5), key=mx.random.key(4))  # additive: not the kernels'
    with routed_attention():  # as a patched model's attention layer calls it
        got = llama.scaled_dot_product_attention(q, k, v, cache=None, scale=0.25, mask=mask)
    assert seen == [(mx.float32, mx.float32)]
    want = inner(q, upcast(k), upcast(v), scale=0.25, mask=mask)
    assert got.dtype == mx.float32 and mx.array_equal(got, want).item()


def test_attention_rejects_mixed_or_other_dtypes() -> None:
    q = mx.zeros((1, 2, 1, 16))
    k = mx.zeros((1, 1, 4, 16), mx.float16)
    for args in (
        (q, k, k.astype(mx.float32)),
        (q.astype(mx.float16), k, k),
        (q, k.astype(mx.bfloat16), k.astype(mx.bfloat16)),
    ):
        with pytest.raises(ValueError):
            native.attention(*args, 0.25)


def test_the_switch_reads_f16_f32_and_rejects_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KV_ENV, raising=False)
    assert kv_dtype() == mx.float16  # the default on the native path
    monkeypatch.setenv(KV_ENV, "f32")
    assert kv_dtype() == mx.float32
    monkeypatch.setenv(KV_ENV, "bf16")
    with pytest.raises(ValueError, match=KV_ENV):
        patch.enable(quantized_llama(4, 32))  # at load time, not on the first request


def test_float16_entries_get_their_own_disk_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KV_ENV, "f16")
    assert kv_namespace("native (avx2, 2 threads) for ...") == {"native_kv": "f16"}
    assert kv_namespace("mlx") == {}  # MLX's own ops: caches stay as mlx-lm makes them
    monkeypatch.setenv(KV_ENV, "f32")
    assert kv_namespace("native (avx2, 2 threads) for ...") == {}  # the namespace as before
