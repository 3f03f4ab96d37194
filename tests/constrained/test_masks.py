"""Packed token masks and their application to logits as a 0/-inf bias."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from vllm_mlx.constrained.masks import (
    apply_allowed_mask,
    apply_packed,
    ban_bias,
    only,
    pack,
    packed_size,
    unpack,
)


@pytest.mark.parametrize("vocab", [1, 7, 8, 33, 600, 49152])
def test_pack_round_trips_and_pads_to_words(vocab):
    allowed = np.random.default_rng(vocab).random(vocab) < 0.3
    packed = pack(allowed)
    assert packed.shape[0] == packed_size(vocab) and packed.shape[0] % 4 == 0
    assert np.array_equal(unpack(packed, vocab), allowed)


@pytest.mark.parametrize("width_delta", [-5, 0, 40])
@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16])
def test_apply_matches_where_for_any_logits_width(width_delta, dtype):
    """Ids beyond the mask (a model's padded vocabulary) are banned; dtype is kept."""
    vocab = 100
    allowed = np.random.default_rng(1).random(vocab) < 0.5
    width = vocab + width_delta
    logits = mx.random.normal((1, width)).astype(dtype)
    expected = np.full(width, -np.inf, dtype=np.float32)
    keep = np.flatnonzero(allowed[:width])
    expected[keep] = np.array(logits.astype(mx.float32))[0, keep]
    out = apply_allowed_mask(logits, allowed)
    assert out.dtype == dtype and out.shape == (1, width)
    assert np.array_equal(np.array(out.astype(mx.float32))[0], expected)


def test_only_and_ban():
    logits = mx.zeros((1, 70))
    out = np.array(apply_packed(logits, only(65, 70)))[0]
    assert out[65] == 0 and np.isneginf(np.delete(out, 65)).all()
    banned = np.array(logits + ban_bias([3, 69, 500], 70, mx.float32))[0]
    assert np.isneginf(banned[[3, 69]]).all() and np.isfinite(np.delete(banned, [3, 69])).all()
