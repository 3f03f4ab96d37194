"""Cache-aware admission: a request sharing a long prefix with one still prefilling waits
for that prefill and reads the prefix from the cache instead of computing it again."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from tiny_models import build_tiny_model

from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.generation import GenerationRequest
from vllm_mlx.engine.prefix_cache import PrefixCache
from vllm_mlx.engine.sampling import RequestSampler, SamplingParams
from vllm_mlx.engine.sources import SHARED_PREFILL_MIN, ModelBatchSource


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


class WatchedSource:
    """A ModelBatchSource whose first step waits until the test says go (so a second
    request is queued while the first is still prefilling), and which records every
    answer to "does this prompt wait for a prefill in progress?"."""

    def __init__(self, inner: ModelBatchSource):
        self.inner = inner
        self.go = threading.Event()
        self.stepping = threading.Event()
        self.waits: list[bool] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def prefill_to_share(self, prompt) -> bool:
        answer = self.inner.prefill_to_share(prompt)
        self.waits.append(answer)
        return answer

    def step(self):
        if not self.stepping.is_set():
            self.stepping.set()
            assert self.go.wait(60)
        return self.inner.step()


def test_a_follower_waits_and_matches_a_cold_run(model, tokenizer):
    prefix = prefix_of(tokenizer)
    source = WatchedSource(
        ModelBatchSource(model, prefix_cache=PrefixCache(64 << 20), prefill_step_size=16)
    )
    engine = Engine(source, tokenizer)
    cold = Engine(ModelBatchSource(model), tokenizer)
    leader, follower = prefix, prefix + tokenizer.encode(" and more")

    def run(engine, prompt):
        request = GenerationRequest(prompt, SamplingParams(max_tokens=8, temperature=0))
        chunks = list(engine.generate_sync(request))
        return [t for c in chunks for t in c.token_ids], chunks[-1].cached_tokens

    try:
        results: dict = {}
        first = threading.Thread(target=lambda: results.__setitem__(0, run(engine, leader)))
        first.start()
        assert source.stepping.wait(60)  # the leader's prefill has begun, and is held there
        second = threading.Thread(target=lambda: results.__setitem__(1, run(engine, follower)))
        second.start()
        while engine._jobs.qsize() == 0 and second.is_alive():  # the follower is queued
            time.sleep(0.001)
        source.go.set()
        first.join()
        second.join()
        assert True in source.waits  # the follower was held back for the leader's prefill
        assert results[1][1] >= len(prefix) - 1  # and then read the prefix from the cache
        assert results[0][1] == 0
        for i, prompt in enumerate((leader, follower)):
            assert results[i][0] == run(cold, prompt)[0]
    finally:
        source.go.set()
        engine.close()
        cold.close()
