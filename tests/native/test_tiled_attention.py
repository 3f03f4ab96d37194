"""The native attention on prompt blocks, whose many query rows the kernel tiles (tasks
of query rows over a sequence's key blocks) where few rows split by key block instead:
both against a float64 reference, and a prompt's rows the same bits at any chunking."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from vllm_mlx import native

pytestmark = pytest.mark.skipif(not native.available(), reason="vllm_mlx.native is not built")

HEADS, KV_HEADS, HEAD_DIM, SCALE = 9, 3, 64, 0.125  # the default model's attention


def qkv(lk: int, dtype: mx.Dtype, seed: int, batch: int = 1, head_dim: int = HEAD_DIM):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((batch, HEADS, lk, head_dim), dtype=np.float32)
    k, v = (rng.standard_normal((batch, KV_HEADS, lk, head_dim), dtype=np.float32) for _ in "kv")
    return mx.array(q), mx.array(k).astype(dtype), mx.array(v).astype(dtype)


def reference(q: mx.array, k: mx.array, v: mx.array) -> np.ndarray:
    """Causal attention in float64 on the keys and values as stored (float16 rounded)."""
    qs, ks, vs = (np.array(a.astype(mx.float32)).astype(np.float64) for a in (q, k, v))
    lq, lk = qs.shape[2], ks.shape[2]
    ks, vs = (np.repeat(a, HEADS // KV_HEADS, axis=1) for a in (ks, vs))
    scores = qs @ ks.swapaxes(-1, -2) * SCALE
    visible = np.arange(lk)[None, :] <= np.arange(lk - lq, lk)[:, None]
    scores = np.where(visible, scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (weights / weights.sum(axis=-1, keepdims=True)) @ vs


@pytest.mark.usefixtures("float_attention")
@pytest.mark.parametrize("dtype", [mx.float16, mx.float32])
@pytest.mark.parametrize(
    ("lq", "offset", "batch"),
    [(1, 700, 1), (8, 2040, 1), (47, 0, 1), (49, 256, 1), (200, 57, 1), (300, 511, 2), (513, 0, 1)],
)
def test_causal_attention_matches_a_float64_reference(
    isa: str, dtype: mx.Dtype, lq: int, offset: int, batch: int
) -> None:
    """Query rows lq after `offset` cached keys: one-row calls, short suffixes (split by
    key block) and prompt blocks (tiled by query rows), at and past block edges."""
    q, k, v = qkv(lq + offset, dtype, seed=lq + offset, batch=batch)
    out = np.array(native.attention(q[:, :, offset:], k, v, SCALE, True))
    want = reference(q[:, :, offset:], k, v)
    assert np.abs(out - want).max() <= 2e-5 * (1.0 + np.abs(want).max())


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("dtype", [mx.float16, mx.float32])
def test_a_prompt_gets_the_same_bits_at_any_chunking(
    isa: str, dtype: mx.Dtype, head_dim: int
) -> None:
    """A prompt prefilled in chunks of any size (each chunk's queries over the cache so
    far and its own keys), or one row at a time as decode steps do, gets one answer: the
    weighted sums of many rows run over a key block in passes of a few dozen keys, one row's
    in one pass, with the same bits."""
    length = 1100
    q, k, v = qkv(length, dtype, seed=7, head_dim=head_dim)

    def chunked(size: int) -> np.ndarray:
        outs = []
        for at in range(0, length, size):
            end = min(length, at + size)
            outs.append(
                np.array(
                    native.attention(q[:, :, at:end], k[:, :, :end], v[:, :, :end], SCALE, True)
                )
            )
        return np.concatenate(outs, axis=2)

    whole = chunked(length)
    for size in (1, 7, 32, 48, 256, 300, 777):
        assert np.array_equal(chunked(size).view(np.uint32), whole.view(np.uint32)), size


def test_a_padded_batch_block_gets_each_sequence_s_own_bits(isa: str) -> None:
    """A prompt block in a left-padded batch (the mask mlx-lm's batched cache makes) gets
    the bits the sequence's block gets alone."""
    lq, lk, pad = 200, 700, 90
    q, k, v = qkv(lk, mx.float16, seed=3, batch=2)
    alone = np.array(native.attention(q[:1, :, lk - lq :], k[:1], v[:1], SCALE, True))
    noise = [
        mx.random.normal((2, a.shape[1], pad, HEAD_DIM)).astype(a.dtype) * 50 for a in (q, k, v)
    ]
    queries, keys, values = (
        mx.concatenate([n, a], axis=2) for n, a in zip(noise, (q, k, v), strict=True)
    )
    positions = mx.arange(lk + pad)
    rows = mx.arange(lk + pad - lq, lk + pad)
    causal = positions[None, :] <= rows[:, None]
    mask = mx.stack([causal & (positions >= pad)[None, :], causal])[:, None]
    got = np.array(native.attention_masked(queries[:, :, -lq:], keys, values, SCALE, mask))
    assert np.array_equal(got[:1].view(np.uint32), alone.view(np.uint32))
