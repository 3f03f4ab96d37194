"""Speculative decoding (`--draft-model`) on tiny random-weight models: greedy output
identical to decoding without a draft (plain, penalties, a JSON schema, a thinking budget,
a second request arriving mid-way), rejection sampling exact, counters counted."""

from __future__ import annotations

import threading

import mlx.core as mx
import numpy as np
import pytest
from test_prefix_agents import build_hybrid
from tiny_models import build_tiny_model

from vllm_mlx.constrained import Constraint, build_logits_processors
from vllm_mlx.engine.drafting import Drafting
from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.generation import GenerationRequest
from vllm_mlx.engine.prefix_cache import PrefixCache
from vllm_mlx.engine.sampling import RequestSampler, SamplingParams
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.engine.speculative import resample
from vllm_mlx.families.catalog import REASONING_FORMATS

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
THINKING_TAIL = "<|im_start|>assistant\n<think>\n"


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_tiny_model(tokenizer, seed=3)


@pytest.fixture(scope="module", params=["self", "other"])
def draft(request, tokenizer, model):
    """The target itself (every proposal accepted) or another model (most rejected)."""
    return model if request.param == "self" else build_tiny_model(tokenizer, seed=9)


def tokens_of(engine, prompt, processors=(), **params):
    request = GenerationRequest(
        prompt, SamplingParams(**{"temperature": 0, **params}), list(processors)
    )
    return [t for c in engine.generate_sync(request) for t in c.token_ids]


def cases(tokenizer):
    chat = tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    thinking = tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n" + THINKING_TAIL)
    return {
        "plain": (chat, lambda: [], {"max_tokens": 30}),
        "penalties": (chat, lambda: [], {"max_tokens": 30, "repetition_penalty": 1.3}),
        "schema": (
            chat,
            lambda: build_logits_processors(
                tokenizer, constraint=Constraint("json_schema", SCHEMA, "response_format")
            ),
            {"max_tokens": 30},
        ),
        "thinking budget": (
            thinking,
            lambda: build_logits_processors(
                tokenizer,
                reasoning_format=REASONING_FORMATS["qwen3"],
                prompt_tail=THINKING_TAIL,
                thinking_budget=3,
            ),
            {"max_tokens": 20},
        ),
    }


@pytest.mark.parametrize("case", ["plain", "penalties", "schema", "thinking budget"])
def test_greedy_output_is_identical_with_a_draft(model, draft, tokenizer, case):
    prompt, processors, params = cases(tokenizer)[case]
    plain = Engine(ModelBatchSource(model), tokenizer)
    source = ModelBatchSource(model, drafting=Drafting(draft_model=draft, num_draft_tokens=4))
    speculative = Engine(source, tokenizer)
    try:
        expected = tokens_of(plain, prompt, processors(), **params)
        assert tokens_of(speculative, prompt, processors(), **params) == expected
        drafted, accepted = source.spec_counts
        assert drafted > 0
        if draft is model and case == "plain":
            assert accepted == drafted  # processors change the target, not the draft
    finally:
        plain.close()
        speculative.close()


def test_a_second_request_moves_the_first_into_the_batch(model, draft, tokenizer):
    first = tokenizer.encode("The capital of France is")
    second = tokenizer.encode("def add(a, b):")
    plain = Engine(ModelBatchSource(model), tokenizer)
    cache = PrefixCache(64 << 20)
    source = ModelBatchSource(
        model, prefix_cache=cache, drafting=Drafting(draft_model=draft, num_draft_tokens=3)
    )
    speculative = Engine(source, tokenizer)
    try:
        expected = [tokens_of(plain, p, max_tokens=n) for p, n in ((first, 200), (second, 60))]
        results: dict = {}
        started = threading.Event()

        def long_one():
            request = GenerationRequest(first, SamplingParams(max_tokens=200, temperature=0))
            out = []
            for chunk in speculative.generate_sync(request):
                out += chunk.token_ids
                started.set()
            results["first"] = out

        thread = threading.Thread(target=long_one)
        thread.start()
        started.wait(60)
        results["second"] = tokens_of(speculative, second, max_tokens=60)
        thread.join()
        assert [results["first"], results["second"]] == expected
        assert source.spec_counts[0] > 0
        assert source.handovers == 1
        assert len(cache) >= 2  # both stored their prompt + output on finishing
    finally:
        plain.close()
        speculative.close()


def test_untrimmable_models_do_not_speculate(tokenizer):
    hybrid = build_hybrid(tokenizer)
    assert not ModelBatchSource(hybrid, drafting=Drafting(draft_model=hybrid)).speculating


@pytest.mark.parametrize("filters", [{}, {"top_k": 3}, {"top_p": 0.7}])
def test_rejection_sampling_draws_exactly_the_target_distribution(filters):
    """Kept with p(d), else drawn from p without d: the marginal must be p itself (as the
    sampler's filters and temperature shape it), whatever the proposal."""
    logits = mx.array([2.0, 1.5, 1.0, 0.2, -0.5, -1.0])
    logprobs = logits - mx.logsumexp(logits)
    params = SamplingParams(temperature=0.8, seed=11, **filters)
    target = np.array(mx.softmax(RequestSampler(params).logits(logprobs)))
    draws = 6000
    for proposal in (0, 3):
        sampler = RequestSampler(params)
        counts = np.bincount(
            [resample(sampler, logprobs, proposal)[0] for _ in range(draws)], minlength=6
        )
        assert np.abs(counts / draws - target).max() < 0.025
        assert counts[target == 0].sum() == 0  # filtered-out tokens never appear
