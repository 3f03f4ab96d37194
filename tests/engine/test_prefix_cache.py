"""Storing a finished sequence's cache in the prefix cache keeps its buffers: on the native
decode path (the embedded model) the request's peak memory, the store included, stays its
cache plus one call's work, measured with MLX's own counters."""

from __future__ import annotations

import random

import mlx.core as mx
import pytest

from vllm_mlx import native
from vllm_mlx.engine.prefix_cache import PrefixCache
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.models import load_model

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not native.available(), reason="vllm_mlx.native is not built"),
]


def greedy(logprobs: mx.array) -> mx.array:
    return mx.argmax(logprobs, axis=-1)


def test_storing_a_finished_sequence_copies_none_of_its_cache() -> None:
    loaded = load_model(None, progress=False)
    source = ModelBatchSource(loaded.model, prefix_cache=PrefixCache(256 << 20))
    rng = random.Random(0)

    def finish(n: int) -> None:
        prompt = [rng.randrange(100, 49_000) for _ in range(n)]
        source.insert(prompt, sampler=greedy, processors=[], max_tokens=3)
        while not any(s.at_limit for s in source.step()[0]):
            pass

    finish(40)  # one-time allocations out of the way
    held = source.prefix_cache.nbytes
    mx.synchronize()
    mx.clear_cache()
    start = mx.get_active_memory()
    mx.reset_peak_memory()
    finish(700)
    added = mx.get_peak_memory() - start
    stored = source.prefix_cache.nbytes - held
    assert len(source.prefix_cache) == 2
    # the stored entry is the sequence's own buffers; a decode write still pending when the
    # store evaluates them copies most of them (≈1.7 times the cache at the peak)
    assert stored < added <= 1.25 * stored, (added, stored)
