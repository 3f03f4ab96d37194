"""A long prompt's cache on the one-row path is allocated once for the whole prompt: the
memory its prefill adds is that cache and one call's attention temporaries, measured with
MLX's own counters, and a prefix-cache hit's rows are copied into it once."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models.cache import KVCache
from tiny_models import build_tiny_model

from vllm_mlx.engine.prefix_cache import PrefixCache
from vllm_mlx.engine.row_prefill import reserve
from vllm_mlx.engine.scheduler import PREFILL_CALL
from vllm_mlx.engine.sources import ModelBatchSource

HIDDEN, HEADS, KV_HEADS = 512, 4, 2  # the tiny qwen3: head size HIDDEN / HEADS
HEAD = HIDDEN // HEADS
PROMPT = 2000


def greedy(logprobs: mx.array) -> mx.array:
    return mx.argmax(logprobs, axis=-1)


def first_token(source: ModelBatchSource, prompt: list[int]) -> int:
    """Insert ``prompt`` and step until its first token is out; its uid."""
    uid, _ = source.insert(prompt, sampler=greedy, processors=[], max_tokens=2)
    while not any(s.uid == uid for s in source.step()[0]):
        pass
    return uid


@pytest.fixture(scope="module")
def wide(tokenizer):
    # one layer, wide heads: the cache outweighs one call's attention scores, so a second
    # copy of it (a buffer regrown while the old one is alive) cannot hide in the bound
    return build_tiny_model(tokenizer, hidden_size=HIDDEN, num_layers=1)


def test_a_long_prompt_adds_its_cache_and_one_calls_scores_to_peak_memory(wide) -> None:
    source = ModelBatchSource(wide)
    first_token(source, [5] * 40)  # one-time allocations out of the way
    mx.synchronize()
    mx.clear_cache()
    start = mx.get_active_memory()
    mx.reset_peak_memory()
    uid = first_token(source, [7 + i % 50 for i in range(PROMPT)])
    added = mx.get_peak_memory() - start
    (layer,) = source._gen._generation_batch.prompt_cache
    positions = layer.keys.shape[2]
    # the prompt and the first decoded token fit, in the cache's step, with nothing regrown
    assert positions == (PROMPT // KVCache.step + 1) * KVCache.step
    cache = 2 * KV_HEADS * positions * HEAD * 4  # keys and values, float32
    scores = PREFILL_CALL * HEADS * PROMPT * 4  # one call's scores over the whole context
    assert cache < added <= cache + 2 * scores, (added, cache, scores)
    source.remove(uid)


def test_a_prefix_hit_is_copied_once_into_the_whole_prompts_room(wide) -> None:
    source = ModelBatchSource(wide, prefix_cache=PrefixCache(64 << 20))
    prefix = [7 + i % 50 for i in range(600)]
    uid = first_token(source, prefix)
    while uid in source._in_batch:
        source.step()
    fetched, cached = source.prefix_cache.fetch(prefix + [9] * 700, None)
    assert cached >= 512 and fetched is not None
    (held,) = fetched
    assert held.offset == cached
    kept = mx.array(held.keys[..., :cached, :])
    reserve(fetched, 700)
    assert held.keys.shape[2] == (cached + 700) // KVCache.step * KVCache.step + KVCache.step
    assert mx.array_equal(held.keys[..., :cached, :], kept).item()
    before = held.keys
    reserve(fetched, 700)  # room enough: the same buffer
    assert held.keys is before
