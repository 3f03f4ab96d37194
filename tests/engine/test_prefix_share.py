"""Copy-free prefix hits: a request writes into cache objects that share the entry's
buffers, and the entry must come out unchanged, for every cache kind the engine stores."""

from __future__ import annotations

import threading

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from mlx_lm.models.cache import make_prompt_cache
from test_prefix_agents import build_hybrid
from tiny_models import build_tiny_model

from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.generation import GenerationRequest
from vllm_mlx.engine.kv_quant import quantized_prompt_cache
from vllm_mlx.engine.prefix_cache import PrefixCache
from vllm_mlx.engine.sampling import SamplingParams
from vllm_mlx.engine.sources import ModelBatchSource


def snapshot(cache):
    return [np.array(v) for c in cache for _, v in tree_flatten(c.state) if isinstance(v, mx.array)]


@pytest.mark.parametrize("kind", ["kv", "quantized", "hybrid"])
def test_writes_through_a_hit_never_reach_the_entry(tokenizer, kind):
    if kind == "hybrid":
        model = build_hybrid(tokenizer)
    else:
        model = build_tiny_model(tokenizer, hidden_size=128)
    fresh = (
        quantized_prompt_cache(model, bits=8, group_size=32)
        if kind == "quantized"
        else make_prompt_cache(model)
    )
    prompt = tokenizer.encode("The capital of France is Paris. " * 4)
    mx.eval(model(mx.array([prompt]), cache=fresh))
    store = PrefixCache(64 << 20)
    store.store(prompt, fresh)
    before = snapshot(fresh)
    for _ in range(2):  # write, then hit again: still the original entry
        cache, served = store.fetch(prompt + [5, 6, 7])
        assert served == len(prompt)
        mx.eval(model(mx.array([[5, 6, 7, 8]]), cache=cache))
    after = snapshot(fresh)
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))


def test_concurrent_hits_on_one_entry_match_a_cold_run(tokenizer):
    model = build_tiny_model(tokenizer, seed=4)
    cached = Engine(ModelBatchSource(model, prefix_cache=PrefixCache(64 << 20)), tokenizer)
    cold = Engine(ModelBatchSource(model), tokenizer)
    prefix = tokenizer.encode("a shared system prompt that agents send on every turn " * 6)
    prompts = [prefix + tokenizer.encode(s) for s in (" one", " two", " three")]

    def tokens(engine, prompt):
        request = GenerationRequest(prompt, SamplingParams(max_tokens=10, temperature=0))
        chunks = list(engine.generate_sync(request))
        return [t for c in chunks for t in c.token_ids], chunks[-1].cached_tokens

    try:
        tokens(cached, prefix)
        results: dict = {}
        threads = [
            threading.Thread(target=lambda i=i: results.__setitem__(i, tokens(cached, prompts[i])))
            for i in range(3)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, prompt in enumerate(prompts):
            assert results[i][1] >= len(prefix) - 1
            assert results[i][0] == tokens(cold, prompt)[0]
    finally:
        cached.close()
        cold.close()
