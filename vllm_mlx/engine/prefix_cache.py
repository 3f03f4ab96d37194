"""A memory-bounded LRU of KV caches keyed by token prefixes (mlx-lm's LRUPromptCache).

Fetching returns a deep copy, so the request that reuses an entry never mutates it; an exact
hit is trimmed by one token because generation needs the last prompt token's logits.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import LRUPromptCache, can_trim_prompt_cache, trim_prompt_cache

_KEY = "model"  # one model per engine


class PrefixCache:
    def __init__(self, max_bytes: int, max_entries: int = 64):
        self._lru = LRUPromptCache(max_size=max_entries, max_bytes=max_bytes)

    def fetch(self, prompt: list[int]) -> tuple[list[Any] | None, int]:
        """(a private copy of the longest cached prefix's KV cache, its length in tokens)."""
        cache, rest = self._lru.fetch_nearest_cache(_KEY, prompt)
        if cache is None:
            return None, 0
        if not rest:
            if not can_trim_prompt_cache(cache):
                return None, 0
            trim_prompt_cache(cache, 1)
            return cache, len(prompt) - 1
        return cache, len(prompt) - len(rest)

    def store(self, tokens: list[int], cache: list[Any]) -> None:
        if tokens and cache:
            # A row extracted from a batch is a lazy slice of the whole batch's KV buffers:
            # evaluate it now, or the entry would keep every row of that batch alive.
            mx.eval([c.state for c in cache])
            self._lru.insert_cache(_KEY, list(tokens), cache)

    @property
    def nbytes(self) -> int:
        return self._lru.nbytes
