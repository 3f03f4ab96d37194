"""The prefix cache keys entries by adapter: a prefix computed under one adapter is never
served to another or to the base, from memory or from disk."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache
from tiny_adapters import MAX_TOKENS, PROMPT, greedy
from tiny_models import build_tiny_model, build_tiny_tokenizer

from vllm_mlx.engine.prefix_cache import PrefixCache, build_prefix_cache
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.models import load_model
from vllm_mlx.models.adapter_set import AdapterSet

LONG = PROMPT * 4


def filled_cache(model, tokens):
    cache = make_prompt_cache(model)
    model(mx.array([tokens]), cache=cache)
    return cache


def test_entries_of_one_lane_serve_only_that_lane():
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, seed=1)
    cache = PrefixCache(64 << 20)
    cache.store(LONG, filled_cache(model, LONG), lane="a")
    assert cache.fetch(LONG + [3], lane=None)[1] == 0
    assert cache.fetch(LONG + [3], lane="b")[1] == 0
    assert cache.fetch(LONG + [3], lane="a")[1] == len(LONG)
    cache.store(LONG, filled_cache(model, LONG))  # the base's own entry replaces nothing
    assert len(cache) == 2 and cache.fetch(LONG + [3])[1] == len(LONG)


def test_disk_entries_keep_their_lane_across_a_restart(tmp_path):
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, seed=1)
    first = build_prefix_cache(model, tokenizer, memory_mb=64, disk_dir=str(tmp_path))
    assert first is not None
    first.store(LONG * 10, filled_cache(model, LONG * 10), lane="a")
    first.flush()
    again = build_prefix_cache(model, tokenizer, memory_mb=64, disk_dir=str(tmp_path))
    assert again is not None
    assert again.fetch(LONG * 10 + [3])[1] == 0
    assert again.fetch(LONG * 10 + [3], lane="b")[1] == 0
    assert again.fetch(LONG * 10 + [3], lane="a")[1] == len(LONG * 10)


def test_a_prompt_run_under_an_adapter_does_not_warm_the_base(fleet):
    loaded = load_model(str(fleet.base))
    adapters = AdapterSet(loaded.model)
    lora = adapters.load("lora", fleet.lora).choice
    source = ModelBatchSource(
        loaded.model, adapter_rows=adapters.rows, prefix_cache=PrefixCache(64 << 20)
    )

    def answer(adapter):
        extra = {"adapter": adapter} if adapter else {}
        uid, cached = source.insert(
            PROMPT, sampler=greedy, processors=[], max_tokens=MAX_TOKENS, **extra
        )
        tokens = []
        while len(tokens) < MAX_TOKENS:
            tokens += [s.token for s in source.step()[0] if s.uid == uid]
        return cached, tokens

    assert answer(lora) == (0, fleet.expected["lora"])
    assert answer(None) == (0, fleet.expected[None])  # not the adapter's prefix
    cached, tokens = answer(lora)
    assert cached > 0 and tokens == fleet.expected["lora"]  # its own lane is reused
    cached, tokens = answer(None)
    assert cached > 0 and tokens == fleet.expected[None]
