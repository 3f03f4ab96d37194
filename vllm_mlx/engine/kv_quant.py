"""Quantized KV caches that continuous batching can use.

mlx-lm 0.32 has a quantized single-sequence cache (``QuantizedKVCache``) but its
``BatchGenerator`` only batches caches with a ``merge`` method, and the quantized one has
none and no batched counterpart. ``BatchQuantizedKVCache`` is ``BatchKVCache`` (left padding,
prefill right-padding, filter, extend, extract) over the quantized ``(packed, scales,
biases)`` triples; mlx-lm's attention sees its ``bits`` and runs quantized attention. A row
extracted from a batch is a ``QuantizedKV``, which the prefix cache stores, trims and hands
back into a batch like any other entry.

On MLX's CPU backend quantized attention is a plain loop: for one query (decode) it is the
faster way, but a prefill chunk attends 2-3x faster over keys and values dequantized for
that step, so multi-token steps return them dequantized and hide ``bits`` from mlx-lm's
attention for that step (docs/performance.md).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx.utils import tree_map, tree_reduce
from mlx_lm.models.cache import BatchKVCache, KVCache, QuantizedKVCache, dynamic_roll

from ..protocols import LayerCache

KV_BITS = (4, 8)
KV_GROUP_SIZES = (32, 64, 128)

Triple = tuple[mx.array, mx.array, mx.array]


def _cat(a: Triple, b: Triple, axis: int) -> Triple:
    w, s, z = (mx.concatenate([x, y], axis=axis) for x, y in zip(a, b, strict=True))
    return w, s, z


class QuantizedKV(QuantizedKVCache):
    """One sequence's quantized cache, mergeable into a batch."""

    # a Triple once filled (mlx-lm's classes declare them as None)
    keys: Any
    values: Any

    def size(self) -> int:
        return self.offset

    def merge(self, caches: list[QuantizedKV]) -> BatchQuantizedKVCache:
        return BatchQuantizedKVCache.merge(caches)


class BatchQuantizedKVCache(BatchKVCache):
    """``BatchKVCache``'s layout (one left-padded row per sequence) with quantized storage."""

    keys: Any  # a Triple once filled, as in QuantizedKV
    values: Any

    def __init__(self, left_padding: list[int], *, group_size: int, bits: int):
        super().__init__(left_padding)
        self.group_size = group_size
        self.kv_bits = bits
        self._dequantized = False

    @property
    def bits(self) -> int:
        """What mlx-lm's attention checks (``hasattr``) to attend over quantized keys."""
        if self._dequantized:
            raise AttributeError("bits: this step's keys and values are dequantized")
        return self.kv_bits

    def _quantize(self, x: mx.array) -> Triple:
        w, scales, biases = mx.quantize(x, group_size=self.group_size, bits=self.kv_bits)
        return w, scales, biases

    def _dequantize(self, x: Triple) -> mx.array:
        return mx.dequantize(*x, group_size=self.group_size, bits=self.kv_bits)

    def _empty(self, batch: int, heads: int, steps: int, dim: int, dtype: mx.Dtype) -> Triple:
        per_int = 32 // self.kv_bits
        groups = dim // self.group_size
        return (
            mx.zeros((batch, heads, steps, dim // per_int), dtype=mx.uint32),
            mx.zeros((batch, heads, steps, groups), dtype=dtype),
            mx.zeros((batch, heads, steps, groups), dtype=dtype),
        )

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[Any, Any]:
        prev = self._idx
        batch, heads, steps, k_dim = keys.shape
        if self.keys is None or prev + steps > self.keys[0].shape[2]:
            grow = (self.step + steps - 1) // self.step * self.step
            new_k = self._empty(batch, heads, grow, k_dim, keys.dtype)
            new_v = self._empty(batch, heads, grow, values.shape[3], keys.dtype)
            if self.keys is None:
                self.keys, self.values = new_k, new_v
            else:
                old_k, old_v = tree_map(lambda x: x[..., :prev, :], (self.keys, self.values))
                self.keys, self.values = _cat(old_k, new_k, 2), _cat(old_v, new_v, 2)
        self.offset = self.offset + steps
        self._idx += steps
        for stored, new in (
            (self.keys, self._quantize(keys)),
            (self.values, self._quantize(values)),
        ):
            for part, fresh in zip(stored, new, strict=True):
                part[..., prev : self._idx, :] = fresh
        self._dequantized = steps > 1
        stored_keys, stored_values = self.keys_and_values()
        if self._dequantized:
            return self._dequantize(stored_keys), self._dequantize(stored_values)
        return stored_keys, stored_values

    def keys_and_values(self) -> tuple[Triple, Triple]:
        return tree_map(lambda x: x[..., : self._idx, :], (self.keys, self.values))

    def finalize(self) -> None:
        if self._right_padding is not None:
            padding = self._right_padding
            roll = lambda x: dynamic_roll(x, padding[:, None], axis=2)  # noqa: E731
            self.keys, self.values = tree_map(roll, (self.keys, self.values))
            self.offset = self.offset - padding
            self.left_padding += padding
            self._right_padding = None

    def filter(self, batch_indices: list[int]) -> None:
        if self.keys is not None:
            self.keys, self.values = tree_map(lambda x: x[batch_indices], (self.keys, self.values))
        self.offset = self.offset[batch_indices]
        self.left_padding = self.left_padding[batch_indices]
        min_left_pad = int(mx.min(self.left_padding))
        if min_left_pad > 0:
            if self.keys is not None:
                self.keys, self.values = tree_map(
                    lambda x: x[..., min_left_pad:, :], (self.keys, self.values)
                )
            self._idx -= min_left_pad
            self.left_padding -= min_left_pad

    def extend(self, other: BatchQuantizedKVCache) -> None:
        if self.keys is None and other.keys is None:
            self.left_padding = mx.concatenate([self.left_padding, other.left_padding])
            self.offset = mx.concatenate([self.offset, other.offset])
            return
        max_idx = max(self._idx, other._idx)
        max_size = max(c.keys[0].shape[2] for c in (self, other) if c.keys is not None)
        filled = self if self.keys is not None else other
        layout = (filled.keys, filled.values)

        def pad(c: BatchQuantizedKVCache):
            if c.keys is None:
                rows = c.offset.shape[0]
                kv = tree_map(
                    lambda x: mx.zeros((rows, x.shape[1], 0, x.shape[3]), dtype=x.dtype), layout
                )
            else:
                kv = (c.keys, c.values)
            left = max_idx - c._idx
            right = max_size - kv[0][0].shape[2] - left
            if right < 0:
                kv = tree_map(lambda x: x[..., :right, :], kv)
                right = 0
            if left or right:
                kv = tree_map(lambda x: mx.pad(x, [(0, 0), (0, 0), (left, right), (0, 0)]), kv)
            return kv, c.offset, c.left_padding + left

        (k1, v1), o1, l1 = pad(self)
        (k2, v2), o2, l2 = pad(other)
        self.keys, self.values = _cat(k1, k2, 0), _cat(v1, v2, 0)
        self.offset = mx.concatenate([o1, o2])
        self.left_padding = mx.concatenate([l1, l2])
        self._idx = max_idx

    def extract(self, idx: int) -> QuantizedKV:
        cache = QuantizedKV(group_size=self.group_size, bits=self.kv_bits)
        padding = int(self.left_padding[idx])
        row = lambda x: mx.contiguous(x[idx : idx + 1, :, padding : self._idx])  # noqa: E731
        cache.keys, cache.values = tree_map(row, (self.keys, self.values))
        cache.offset = cache.keys[0].shape[2]
        return cache

    @classmethod
    def merge(cls, caches: list[QuantizedKV]) -> BatchQuantizedKVCache:
        first = caches[0]
        lengths = [c.offset if c.keys is not None else 0 for c in caches]
        max_length = max(lengths)
        padding = [max_length - n for n in lengths]
        cache = cls(padding, group_size=first.group_size, bits=first.bits)
        if max_length == 0:
            return cache
        filled = next(c for c in caches if c.keys is not None)

        def stacked(parts: Triple, pick) -> Triple:
            out = []
            for j, x in enumerate(parts):
                full = mx.zeros((len(caches), x.shape[1], max_length, x.shape[3]), dtype=x.dtype)
                for i, (p, c) in enumerate(zip(padding, caches, strict=True)):
                    if c.keys is not None:
                        full[i : i + 1, :, p : p + c.offset] = pick(c)[j][..., : c.offset, :]
                out.append(full)
            w, scales, biases = out
            return w, scales, biases

        cache.keys = stacked(filled.keys, lambda c: c.keys)
        cache.values = stacked(filled.values, lambda c: c.values)
        cache.offset += max_length
        cache._idx = max_length
        return cache

    @property
    def nbytes(self) -> int:
        if self.keys is None:
            return 0
        return tree_reduce(lambda total, x: total + x.nbytes, (self.keys, self.values), 0)


def quantized_prompt_cache(model: Any, *, bits: int, group_size: int) -> list[LayerCache]:
    """An empty quantized cache (``QuantizedKV``) for each layer; ValueError for a model
    whose layers are not all plain KV caches (sliding-window, state-space): their caches
    have no quantized form."""
    layers = model.make_cache() if hasattr(model, "make_cache") else None
    if layers is not None and not all(type(c) is KVCache for c in layers):
        kinds = sorted({type(c).__name__ for c in layers})
        raise ValueError(f"--kv-bits needs plain KV caches; this model uses {', '.join(kinds)}")
    count = len(layers) if layers is not None else len(model.layers)
    return [QuantizedKV(group_size=group_size, bits=bits) for _ in range(count)]
