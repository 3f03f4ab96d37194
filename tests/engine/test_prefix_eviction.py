"""The prefix cache evicts its least recently used entry wherever it sits in the list."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from vllm_mlx.engine.prefix_cache import PrefixCache


def _cache(length: int) -> list[KVCache]:
    layer = KVCache()
    layer.update_and_fetch(mx.ones((1, 2, length, 8)), mx.ones((1, 2, length, 8)))
    return [layer]


def test_evicting_an_entry_behind_a_longer_one_keeps_the_rest():
    cache = PrefixCache(64 << 20, max_entries=2)
    first, second, third = list(range(10, 64)), list(range(100, 180)), list(range(200, 230))
    cache.store(first, _cache(len(first)))
    cache.store(second, _cache(len(second)))
    assert cache.fetch(first + [1])[1] == len(first)  # now the second is least recently used
    cache.store(third, _cache(len(third)))
    assert cache.fetch(second + [1])[1] == 0
    assert cache.fetch(first + [1])[1] == len(first)
    assert cache.fetch(third + [1])[1] == len(third)
