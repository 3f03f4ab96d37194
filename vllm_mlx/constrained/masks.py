"""Token masks as packed bitmasks, applied to logits as an additive 0/-inf bias.

Why packed: llguidance writes its mask as 32-bit words, and narrowing a mask (the JSON guard)
is a few thousand byte operations instead of a 49k-element boolean pass. Why a bias: on CPU,
``mx.where`` over a 49k boolean row measured ≈250 µs per token; a 0/-inf bias gathered in MLX
from a 256-entry byte table (only the 6 KB packed mask crosses over) and added to the logits
costs a fraction of that (benchmarks/bench_constrained.py, docs/constrained.md).

Bit ``i`` of the mask is bit ``i % 8`` (little-endian) of byte ``i // 8``; masks are padded
to whole 32-bit words, as llguidance writes them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import mlx.core as mx
import numpy as np

NEG_INF = np.float32(-np.inf)
# _BYTE_BIAS[b] is the bias of the 8 tokens whose allowed-bits are byte b.
_BYTE_BIAS = np.where(
    np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little").astype(bool),
    np.float32(0.0),
    NEG_INF,
).astype(np.float32)


def packed_size(vocab: int) -> int:
    """Bytes of a packed mask over ``vocab`` ids (whole 32-bit words)."""
    return (vocab + 31) // 32 * 4


def pack(allowed: np.ndarray) -> np.ndarray:
    """A boolean mask packed into bytes (padded with banned ids to whole words)."""
    packed = np.zeros(packed_size(allowed.shape[0]), dtype=np.uint8)
    bits = np.packbits(allowed, bitorder="little")
    packed[: bits.shape[0]] = bits
    return packed


def unpack(packed: np.ndarray, vocab: int) -> np.ndarray:
    """The boolean mask over the first ``vocab`` ids."""
    return np.unpackbits(packed, bitorder="little", count=vocab).astype(bool)


def only(token: int, vocab: int) -> np.ndarray:
    """A packed mask allowing just ``token``."""
    packed = np.zeros(packed_size(vocab), dtype=np.uint8)
    packed[token >> 3] = 1 << (token & 7)
    return packed


@functools.cache
def _byte_bias_mx() -> mx.array:
    return mx.array(_BYTE_BIAS)


def apply_packed(logits: mx.array, packed: np.ndarray) -> mx.array:
    """``logits`` with every id the packed mask does not allow set to -inf.

    Only the packed bytes cross to MLX; the bias is gathered there, in the same lazy graph as
    the logits, instead of copying a full-width float row per token.
    """
    width = logits.shape[-1]
    bias = _byte_bias_mx()[mx.array(packed)].reshape(1, -1)
    if bias.shape[-1] > width:
        bias = bias[:, :width]
    elif bias.shape[-1] < width:
        pad = mx.full((1, width - bias.shape[-1]), -np.inf, dtype=mx.float32)
        bias = mx.concatenate([bias, pad], axis=1)
    if bias.dtype != logits.dtype:
        bias = bias.astype(logits.dtype)
    return logits + bias


def apply_allowed_mask(logits: mx.array, allowed: np.ndarray) -> mx.array:
    """``logits`` with ids not in the boolean mask ``allowed`` set to -inf."""
    return apply_packed(logits, pack(allowed))


def ban_bias(ids: Sequence[int], width: int, dtype: mx.Dtype) -> mx.array:
    """A (1, width) bias banning ``ids`` (build once per request and reuse)."""
    bias = np.zeros((1, width), dtype=np.float32)
    bias[0, [i for i in ids if i < width]] = NEG_INF
    return mx.array(bias).astype(dtype)
