"""Cache-aware admission: a request sharing a long prefix with one still prefilling waits
for that prefill and reads the prefix from the cache instead of computing it again."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from tiny_models import build_tiny_model

from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.prefix_cache import PrefixCache
from vllm_mlx.engine.sampling import RequestSampler, SamplingParams
from vllm_mlx.engine.sources import SHARED_PREFILL_MIN, ModelBatchSource
from vllm_mlx.engine.types import GenerationRequest


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_tiny_model(tokenizer, seed=6)


def prefix_of(tokenizer):
    ids = tokenizer.encode("def add(a, b):\n    return a + b\n" * 40)
    assert len(ids) > SHARED_PREFILL_MIN + 50
    return ids


def test_the_source_stores_a_shared_prompt_when_its_prefill_ends(model, tokenizer):
    cache = PrefixCache(64 << 20)
    source = ModelBatchSource(model, prefix_cache=cache, prefill_step_size=32)
    prefix = prefix_of(tokenizer)
    sampler = RequestSampler(SamplingParams(temperature=0))
    source.insert(prefix, sampler=sampler, processors=[], max_tokens=20)
    source.step()  # one chunk of 32: still prefilling
    follower = prefix + tokenizer.encode(" and more")
    assert source.prefill_to_share(follower)
    assert not source.prefill_to_share(tokenizer.encode("unrelated prompt"))
    assert not source.prefill_to_share(prefix[: SHARED_PREFILL_MIN - 1] + [5])
    for _ in range(100):
        source.step()
        if not source.prefill_to_share(follower):
            break
    assert cache.served(np.asarray(follower)) == len(prefix)
    assert not source.prefill_to_share(follower)


def test_a_follower_waits_and_matches_a_cold_run(model, tokenizer):
    prefix = prefix_of(tokenizer)
    source = ModelBatchSource(model, prefix_cache=PrefixCache(64 << 20), prefill_step_size=16)
    engine = Engine(source, tokenizer)
    cold = Engine(ModelBatchSource(model), tokenizer)
    prompts = [prefix, prefix + tokenizer.encode(" and more")]

    def run(engine, prompt):
        request = GenerationRequest(prompt, SamplingParams(max_tokens=8, temperature=0))
        chunks = list(engine.generate_sync(request))
        return [t for c in chunks for t in c.token_ids], chunks[-1].cached_tokens

    try:
        results: dict = {}
        threads = [
            threading.Thread(target=lambda i=i: results.__setitem__(i, run(engine, prompts[i])))
            for i in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, prompt in enumerate(prompts):
            assert results[i][0] == run(cold, prompt)[0]
        # Whichever was admitted second read the shared prefix from the cache.
        assert max(results[0][1], results[1][1]) >= len(prefix) - 1
    finally:
        engine.close()
        cold.close()
