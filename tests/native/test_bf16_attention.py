"""The BF16 attention bodies (vdpbf16ps, and AMX tiles): within their rounding bound of
exact attention, and a query row's bits the same in a decode step, any prompt block and
any batch."""

from __future__ import annotations

import math
from collections.abc import Iterator

import mlx.core as mx
import numpy as np
import pytest

from vllm_mlx import native

DEFAULT_BODY = native.attention_body()  # the process's, restored after each probe and test
pytestmark = pytest.mark.skipif(
    not (native.available() and native.set_attention_body("bf16")),
    reason="no AVX-512 BF16 on this CPU or build",
)


BODIES = [
    pytest.param(
        "amx",
        marks=pytest.mark.skipif(not native.set_attention_body("amx"), reason="no AMX-BF16 here"),
    ),
    "bf16",
]


def restore_default() -> None:
    if DEFAULT_BODY is not None:
        assert native.set_attention_body(DEFAULT_BODY)


restore_default()


@pytest.fixture(autouse=True, params=BODIES)
def bf16_body(request: pytest.FixtureRequest) -> Iterator[str]:
    assert native.set_attention_body(request.param)
    yield request.param
    restore_default()


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    """Causal grouped-query attention in float64."""
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, 1).astype(np.float64), np.repeat(v, group, 1).astype(np.float64)
    s = q.astype(np.float64) @ k.transpose(0, 1, 3, 2) * scale
    lq, lk = q.shape[2], k.shape[2]
    s = np.where(np.arange(lk)[None, :] <= lk - lq + np.arange(lq)[:, None], s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize(("lq", "lk"), [(1, 1), (1, 700), (5, 300), (33, 33), (96, 1000)])
@pytest.mark.parametrize("dtype", [mx.float16, mx.float32])
def test_within_the_bf16_rounding_bound(
    dim: int, lq: int, lk: int, dtype: mx.Dtype, bf16_body: str
) -> None:
    rng = np.random.default_rng(lq * lk + dim)
    q = rng.standard_normal((2, 9, lq, dim)).astype(np.float32)
    k = mx.array(2 * rng.standard_normal((2, 3, lk, dim)).astype(np.float32)).astype(dtype)
    v = mx.array(rng.standard_normal((2, 3, lk, dim)).astype(np.float32)).astype(dtype)
    scale = dim**-0.5
    kf, vf = np.array(k.astype(mx.float32)), np.array(v.astype(mx.float32))
    got = np.array(native.attention(mx.array(q), k, v, scale, True))
    want = reference(q, kf, vf, scale)
    # q and k rounded to 8 significant bits move a score by at most delta; the weights
    # then by a factor within exp(+-2 delta); weights and values rounded, 2^-8 and 2^-9
    group = q.shape[1] // kf.shape[1]
    terms = np.abs(q) @ np.abs(np.repeat(kf, group, 1)).transpose(0, 1, 3, 2)
    delta = scale * (2**-8 + 2**-18) * terms.max()
    bound = np.abs(vf).max() * (math.expm1(2 * delta) + 2**-8 + 2**-9) + 1e-6
    assert np.abs(got - want).max() <= bound
    # and well off the float body's float32 rounding: this is the bf16 body running
    native.set_attention_body("float")
    exact = np.array(native.attention(mx.array(q), k, v, scale, True))
    assert np.abs(exact - want).max() < 1e-4 < np.abs(got - want).max()
    if bf16_body == "amx":  # other bits than the vdpbf16ps body: the tiles ran
        native.set_attention_body("bf16")
        other = np.array(native.attention(mx.array(q), k, v, scale, True))
        assert lk < 16 or not np.array_equal(other, got)


def test_a_row_has_the_same_bits_in_decode_prompt_blocks_and_batches() -> None:
    rng = np.random.default_rng(1)
    n = 600
    q = mx.array(rng.standard_normal((1, 9, n, 64)).astype(np.float32))
    k = mx.array(rng.standard_normal((1, 3, n, 64)).astype(np.float32)).astype(mx.float16)
    v = mx.array(rng.standard_normal((1, 3, n, 64)).astype(np.float32)).astype(mx.float16)
    full = np.array(native.attention(q, k, v, 0.125, True))
    for i in (0, 1, 15, 16, 17, 255, 256, 257, 511, 599):  # decode steps
        step = native.attention(q[:, :, i : i + 1], k[:, :, : i + 1], v[:, :, : i + 1], 0.125, True)
        assert np.array_equal(np.array(step)[0, :, 0], full[0, :, i]), i
    for a, b in ((0, 37), (37, 300), (300, 600), (100, 101)):  # prompt blocks
        block = native.attention(q[:, :, a:b], k[:, :, :b], v[:, :, :b], 0.125, True)
        assert np.array_equal(np.array(block)[0], full[0, :, a:b]), (a, b)
    other = mx.array(rng.standard_normal((1, 9, n, 64)).astype(np.float32))
    batch = native.attention(
        mx.concatenate([other, q]),
        mx.concatenate([k[:, :, ::-1], k]),
        mx.concatenate([v * 2, v]),
        0.125,
        True,
    )
    assert np.array_equal(np.array(batch)[1], full[0])


def test_a_left_padded_row_in_a_masked_batch_has_its_bits_alone() -> None:
    rng = np.random.default_rng(2)
    n, pad = 300, 37
    q = rng.standard_normal((1, 9, n, 64)).astype(np.float32)
    k = rng.standard_normal((1, 3, n, 64)).astype(np.float32)
    v = rng.standard_normal((1, 3, n, 64)).astype(np.float32)
    half = [mx.array(x).astype(mx.float16) for x in (k, v)]
    alone = np.array(native.attention(mx.array(q), half[0], half[1], 0.125, True))

    def padded(x: np.ndarray) -> np.ndarray:
        return np.concatenate([np.zeros((1, x.shape[1], pad, 64), np.float32), x], axis=2)

    other = [rng.standard_normal((1, h, n + pad, 64)).astype(np.float32) for h in (9, 3, 3)]
    qb, kb, vb = (np.concatenate([o, padded(x)]) for o, x in zip(other, (q, k, v), strict=True))
    lk = n + pad
    causal = np.arange(lk)[None, :] <= np.arange(lk)[:, None]
    mask = np.stack([causal, causal & (np.arange(lk) >= pad)[None, :]])[:, None]
    got = native.attention_masked(
        mx.array(qb),
        mx.array(kb).astype(mx.float16),
        mx.array(vb).astype(mx.float16),
        0.125,
        mx.array(mask),
    )
    assert np.array_equal(np.array(got)[1, :, pad:], alone[0])
