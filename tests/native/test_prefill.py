"""Prefill attention (MLX's matmuls around the native causal softmax) against MLX's own
ops, on every instruction set this CPU has (the vectorized SiLU·mul is checked through
the fused MLP block in test_fused.py)."""

from __future__ import annotations

import mlx.core as mx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mlx_lm.models import llama
from test_kernels import SETTINGS, assert_close
from test_patch import PROMPT, quantized_llama

from vllm_mlx import native
from vllm_mlx.native import patch
from vllm_mlx.native.layers import PREFILL_ENV

pytestmark = pytest.mark.skipif(not native.available(), reason="vllm_mlx.native is not built")


@st.composite
def prefill_cases(draw):
    kv_heads = draw(st.integers(1, 3))
    heads = kv_heads * draw(st.integers(1, 3))
    queries = draw(st.integers(9, 40))
    keys = queries + draw(st.sampled_from([0, 1, 7, 33]))
    dim = draw(st.sampled_from([8, 16, 64]))
    return draw(st.integers(1, 2)), heads, kv_heads, queries, keys, dim, draw(st.booleans())


@SETTINGS
@given(case=prefill_cases(), seed=st.integers(0, 2**16))
def test_prefill_attention_matches_mlx_sdpa(isa, case, seed: int) -> None:
    B, Hq, Hkv, L, Lk, D, causal = case
    k0, k1, k2 = mx.random.split(mx.random.key(seed), 3)
    q = mx.random.normal((B, Hq, L, D), key=k0)
    k = mx.random.normal((B, Hkv, Lk, D), key=k1) * 2
    v = mx.random.normal((B, Hkv, Lk, D), key=k2)
    scale = D**-0.5
    mask = "causal" if causal else None
    want = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
    assert_close(patch.prefill_attention(q, k, v, scale, causal), want)


@SETTINGS
@given(
    rows=st.integers(1, 6),
    width=st.integers(1, 70),
    offset=st.integers(0, 80),
    seed=st.integers(0, 2**16),
)
def test_softmax_causal_matches_a_masked_softmax(isa, rows, width, offset, seed) -> None:
    scores = mx.random.normal((2, rows, width), key=mx.random.key(seed)) * 4
    visible = mx.arange(width)[None, :] <= (offset + mx.arange(rows))[:, None]
    want = mx.softmax(mx.where(visible, scores, -mx.inf), axis=-1)
    assert_close(native.softmax_causal(scores, offset), want)


def test_prefill_blocks_reach_the_native_softmax(monkeypatch: pytest.MonkeyPatch) -> None:
    """With VLLM_MLX_NATIVE_PREFILL=blas (by default every block runs native.attention)."""
    monkeypatch.setenv(PREFILL_ENV, "blas")
    model = quantized_llama(4, 32)
    patch.enable(model)
    calls: list[tuple[int, ...]] = []
    real = native.softmax_causal
    monkeypatch.setattr(native, "softmax_causal", lambda s, o: calls.append(s.shape) or real(s, o))
    model(PROMPT)  # 11 rows: past the decode kernel's 8
    assert len(calls) == len(model.layers) and all(shape[2] == 11 for shape in calls)
    assert llama.scaled_dot_product_attention._vllm_mlx_native  # type: ignore[attr-defined]
