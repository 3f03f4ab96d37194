"""The server's batching and prefix cache on float16 KV caches: mlx-lm's BatchGenerator
merges, extends, filters and extracts them, the prefix cache stores and shares them,
speculative decoding verifies over and trims them, and a routed model's tokens through all
of it equal a plain run's, on float32 caches as on float16 ones (``kv``)."""

from __future__ import annotations

import threading

import mlx.core as mx
import numpy as np
import pytest
from test_patch import quantized_llama
from tiny_models import build_tiny_tokenizer

from vllm_mlx import native
from vllm_mlx.engine.drafting import Drafting
from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.generation import GenerationRequest
from vllm_mlx.engine.prefix_cache import PrefixCache
from vllm_mlx.engine.sampling import SamplingParams
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.native import patch

pytestmark = pytest.mark.skipif(not native.available(), reason="vllm_mlx.native is not built")


def tokens(engine: Engine, prompt: list[int]) -> tuple[list[int], int]:
    request = GenerationRequest(prompt, SamplingParams(max_tokens=10, temperature=0))
    chunks = list(engine.generate_sync(request))
    return [t for c in chunks for t in c.token_ids], chunks[-1].cached_tokens


def test_concurrent_prefix_hits_match_a_cold_run(kv: bool) -> None:
    tokenizer = build_tiny_tokenizer()
    model = quantized_llama(4, 32, seed=4, hidden=256)  # head size 64
    patch.enable(model)
    store = PrefixCache(64 << 20)
    cached = Engine(ModelBatchSource(model, prefix_cache=store), tokenizer)
    cold = Engine(ModelBatchSource(model), tokenizer)
    prefix = tokenizer.encode("a shared system prompt that agents send on every turn " * 6)
    prompts = [prefix + tokenizer.encode(s) for s in (" one", " two", " three")]
    try:
        tokens(cached, prefix)
        entry, served = store.fetch(prefix + prompts[0][-1:])  # views of the entry's arrays
        assert served > 0 and entry[0].keys.dtype == (mx.float16 if kv else mx.float32)
        before = [np.array(c.keys) for c in entry]
        results: dict = {}
        threads = [  # one batch: merged, extended and filtered as the requests come and go
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
        # the entry the three requests decoded from is as it was
        assert all(np.array_equal(np.array(c.keys), b) for c, b in zip(entry, before, strict=True))
    finally:
        cached.close()
        cold.close()


@pytest.mark.parametrize("other_draft", [False, True])  # the target itself: all accepted
def test_speculative_decoding_gives_plain_greedy_tokens(kv: bool, other_draft: bool) -> None:
    """The draft's proposals verified in one multi-token step over the (float16) cache and
    rejected ones trimmed off it: the tokens of decoding without a draft. (Tiny random
    Llamas repeat one token; this target and draft still disagree on some proposals.)"""
    tokenizer = build_tiny_tokenizer()
    model = quantized_llama(4, 32, seed=5, hidden=256)
    patch.enable(model)
    draft = quantized_llama(4, 32, seed=2, hidden=256) if other_draft else model
    patch.enable(draft)
    speculative = Engine(ModelBatchSource(model, drafting=Drafting(draft_model=draft)), tokenizer)
    plain = Engine(ModelBatchSource(model), tokenizer)
    prompt = tokenizer.encode("a prompt to continue for a while " * 3)
    try:
        want = tokens(plain, prompt)[0]
        assert tokens(speculative, prompt)[0] == want
        drafted, accepted = speculative.source.spec_counts
        assert drafted > 0 and (accepted < drafted if other_draft else accepted == drafted)
    finally:
        speculative.close()
        plain.close()
