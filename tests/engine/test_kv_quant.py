"""Quantized KV cache (`--kv-bits`) on tiny random-weight models: the divergence from the
full cache stays within a documented bound, and batching, the prefix cache and long chunked
prompts change nothing about what the quantized cache produces."""

from __future__ import annotations

import threading

import mlx.core as mx
import pytest
from mlx_lm.models.cache import KVCache
from tiny_models import build_tiny_model

from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.generation import GenerationRequest
from vllm_mlx.engine.kv_quant import QuantizedKV, quantized_prompt_cache
from vllm_mlx.engine.prefix_cache import PrefixCache
from vllm_mlx.engine.sampling import SamplingParams
from vllm_mlx.engine.sources import ModelBatchSource

# Max |log-prob difference| to the full cache over every position of a 120-token prompt.
# Random weights give near-uniform logits, the worst case for argmax flips; measured maxima
# over seeds 0-3 were 0.026-0.031 (8-bit) and 0.39-0.63 (4-bit).
BOUND = {8: 0.05, 4: 1.0}
GROUP = 32  # the tiny model's head size is 32


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_tiny_model(tokenizer, seed=0, hidden_size=128)


def tokens_of(engine, prompt, **params):
    request = GenerationRequest(prompt, SamplingParams(**{"temperature": 0, **params}))
    chunks = list(engine.generate_sync(request))
    return [t for c in chunks for t in c.token_ids], chunks[-1]


def engine_for(model, tokenizer, bits, *, cache_mb=0, **kwargs):
    cache = PrefixCache(cache_mb * 2**20) if cache_mb else None
    source = ModelBatchSource(
        model, prefix_cache=cache, kv_bits=bits, kv_group_size=GROUP, **kwargs
    )
    return Engine(source, tokenizer)


@pytest.mark.parametrize("bits", [8, 4])
def test_divergence_from_the_full_cache_is_bounded(model, tokenizer, bits):
    prompt = mx.array([tokenizer.encode("The capital of France is Paris. Let me think. " * 8)])

    def logprobs(cache):
        logits = model(prompt, cache=cache)[0].astype(mx.float32)
        return logits - mx.logsumexp(logits, axis=-1, keepdims=True)

    full = logprobs([KVCache() for _ in model.layers])
    quantized = logprobs([QuantizedKV(group_size=GROUP, bits=bits) for _ in model.layers])
    assert 0 < mx.abs(quantized - full).max().item() < BOUND[bits]


def test_8_bit_greedy_text_equals_the_full_cache(model, tokenizer):
    prompt = tokenizer.encode("The capital of France is Paris. Let me think")
    full, quant = engine_for(model, tokenizer, None), engine_for(model, tokenizer, 8)
    try:
        assert (
            tokens_of(quant, prompt, max_tokens=40)[0] == tokens_of(full, prompt, max_tokens=40)[0]
        )
    finally:
        full.close()
        quant.close()


@pytest.mark.parametrize("bits", [8, 4])
def test_batching_prefix_hits_and_chunked_prompts_match_a_lone_run(model, tokenizer, bits):
    """Mixed prompt lengths in one batch (merge, padding, extend, filter), a prefix-cache hit
    (extract, trim, merge of a stored entry) and a prompt longer than the prefill chunk and
    the cache's 256-step growth all give what the same request gives alone."""
    engine = engine_for(model, tokenizer, bits, cache_mb=64, prefill_step_size=64)
    try:
        short = tokenizer.encode("hello there")
        long = tokenizer.encode("def add(a, b):\n    return a + b\n" * 30)  # > 300 tokens
        assert len(long) > 300
        alone = {
            name: tokens_of(engine, p, max_tokens=12)[0] for name, p in (("s", short), ("l", long))
        }
        results: dict = {}
        jobs = [("s", short, 12), ("l", long, 12), ("x", tokenizer.encode("another one"), 5)]

        def go(name, prompt, n):
            results[name] = tokens_of(engine, prompt, max_tokens=n)

        threads = [threading.Thread(target=go, args=job) for job in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results["s"][0] == alone["s"]
        assert results["l"][0] == alone["l"]
        assert results["l"][1].cached_tokens > 0  # the lone run's entry was reused
        hit, last = tokens_of(engine, long + tokenizer.encode(" more"), max_tokens=6)
        assert last.cached_tokens >= len(long) - 1
        cold = engine_for(model, tokenizer, bits)
        try:
            assert hit == tokens_of(cold, long + tokenizer.encode(" more"), max_tokens=6)[0]
        finally:
            cold.close()
    finally:
        engine.close()


def test_stored_entries_are_quantized_and_smaller(model, tokenizer):
    prompt = tokenizer.encode("The capital of France is Paris. " * 10)
    sizes = {}
    for bits in (None, 8, 4):
        cache = PrefixCache(64 * 2**20)
        engine = Engine(
            ModelBatchSource(model, prefix_cache=cache, kv_bits=bits, kv_group_size=GROUP),
            tokenizer,
        )
        try:
            tokens_of(engine, prompt, max_tokens=2)
        finally:
            engine.close()
        sizes[bits] = cache.nbytes
    assert sizes[None] > sizes[8] > sizes[4] > 0


def test_unfit_group_size_fails_at_start_up(tokenizer):
    narrow = build_tiny_model(tokenizer, hidden_size=64)  # head size 16
    with pytest.raises(ValueError, match="kv-group-size 32 does not fit"):
        ModelBatchSource(narrow, kv_bits=8, kv_group_size=32)


def test_models_without_plain_kv_caches_are_refused(model):
    class Sliding:
        layers = model.layers

        def make_cache(self):
            from mlx_lm.models.cache import RotatingKVCache

            return [RotatingKVCache(max_size=16) for _ in self.layers]

    with pytest.raises(ValueError, match="RotatingKVCache"):
        quantized_prompt_cache(Sliding(), bits=8, group_size=GROUP)
