"""A request's sampler and penalty processors by what they do to the next token: min_p
drops the unlikely tail, presence and frequency penalties lower what was already said (once,
or once per occurrence), stop_token_ids end a generation; on a replay source or a tiny
random-weight model, never the real one."""

from __future__ import annotations

from collections import Counter

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import TokenBuffer
from tiny_models import build_tiny_model

from vllm_mlx import native
from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.generation import GenerationRequest
from vllm_mlx.engine.sampling import (
    MLX_OPS,
    Numerics,
    SamplingParams,
    computing_with,
    log_normalize,
    make_penalty_processors,
    make_sampler,
    process_rows,
    sample_rows,
)
from vllm_mlx.engine.sources import ModelBatchSource, ReplayBatchSource
from vllm_mlx.native.sampling import draw

PROBS = [0.5, 0.3, 0.15, 0.05]  # token 3 is under min_p = 0.2 of the top (0.1)


def draws(params: SamplingParams, count: int = 400) -> Counter:
    sampler = make_sampler(params)
    logprobs = mx.log(mx.array([PROBS]))
    return Counter(int(sampler(logprobs).item()) for _ in range(count))


def test_min_p_drops_tokens_below_its_share_of_the_top_one():
    seen = draws(SamplingParams(temperature=1.0, min_p=0.2, seed=0))
    assert set(seen) == {0, 1, 2}
    assert draws(SamplingParams(temperature=1.0, seed=0))[3] > 0  # without min_p it is drawn


def test_min_p_keeps_the_top_token_however_high_it_is_set():
    assert set(draws(SamplingParams(temperature=1.0, min_p=1.0, seed=0), 50)) == {0}


def penalised(params: SamplingParams, context: list[int], vocab: int = 8) -> np.ndarray:
    logits = mx.zeros((1, vocab))
    for processor in make_penalty_processors(params):
        logits = processor(mx.array(context), logits)
    return np.array(logits[0])


def test_presence_penalty_lowers_each_token_said_once_however_often():
    out = penalised(SamplingParams(presence_penalty=1.5), [2, 2, 2, 5])
    assert out.tolist() == [0, 0, -1.5, 0, 0, -1.5, 0, 0]


def test_frequency_penalty_lowers_each_token_once_per_occurrence():
    out = penalised(SamplingParams(frequency_penalty=0.5), [2, 2, 2, 5])
    assert out.tolist() == [0, 0, -1.5, 0, 0, -0.5, 0, 0]


def test_no_penalty_asked_builds_no_processor():
    assert make_penalty_processors(SamplingParams()) == []


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_tiny_model(tokenizer, seed=4)


def generate(engine: Engine, prompt: list[int], **params) -> tuple[list[int], str]:
    request = GenerationRequest(prompt, SamplingParams(temperature=0, **params))
    chunks = list(engine.generate_sync(request))
    return [t for c in chunks for t in c.token_ids], chunks[-1].finish_reason


def test_a_large_frequency_penalty_stops_a_greedy_model_repeating(model, tokenizer):
    engine = Engine(ModelBatchSource(model), tokenizer)
    try:
        prompt = tokenizer.encode("hello hello hello")
        plain, _ = generate(engine, prompt, max_tokens=16)
        assert len(set(plain)) < len(plain)  # this greedy model repeats itself
        # 16 tokens fit in the penalty's window (mlx-lm's last 20): none is said twice
        penalised_ids, _ = generate(engine, prompt, max_tokens=16, frequency_penalty=100.0)
        assert len(set(penalised_ids)) == len(penalised_ids), penalised_ids
    finally:
        engine.close()


def test_stop_token_ids_end_the_generation_without_the_stop_token(tokenizer):
    ids = tokenizer.encode("one two three four", add_special_tokens=False)
    engine = Engine(ReplayBatchSource(ids), tokenizer)
    try:
        assert generate(engine, [1], max_tokens=50) == (ids, "stop")  # the replay runs out
        tokens, reason = generate(engine, [1], max_tokens=50, stop_token_ids=[ids[2]])
        assert (tokens, reason) == (ids[:2], "stop")
        # an id that never comes changes nothing; the limit still applies
        assert generate(engine, [1], max_tokens=3, stop_token_ids=[0]) == (ids[:3], "length")
    finally:
        engine.close()


ROW_PARAMS = [  # one batch's rows: greedy, seeded draws of several filters, biases, penalties
    SamplingParams(temperature=0.8, seed=1, logit_bias={3: -1e9}),
    SamplingParams(temperature=0.0, logit_bias={3: -1e9, 7: 2.0}),
    SamplingParams(temperature=0.8, seed=2, logit_bias={3: -1e9}),
    SamplingParams(temperature=0.7, seed=3, top_p=0.9, repetition_penalty=1.3),
    SamplingParams(temperature=0.8, seed=4),
    SamplingParams(temperature=0.8, seed=5, logit_bias={5: 4.0}, presence_penalty=0.5),
]


def rows_alone(logits: mx.array, inputs: mx.array, history: list[list[int]]) -> list:
    """Each row through its own processors, normalization and sampler, one row at a time
    (mlx-lm's batch step on a batch of distinct samplers)."""
    out = []
    for e, params in enumerate(ROW_PARAMS):
        row, context = logits[e : e + 1], TokenBuffer(history[e])
        for processor in make_penalty_processors(params):
            row = processor(context.update_and_fetch(inputs[e : e + 1]), row)
        logprobs = log_normalize(row)
        out.append((make_sampler(params)(logprobs).item(), np.array(logprobs[0])))
    return out


@pytest.mark.parametrize("native_draw", [False, True])
def test_rows_processed_and_drawn_together_are_each_rows_own(native_draw):
    if native_draw and not native.provides("sample"):
        pytest.skip("vllm_mlx.native has no sample kernel")
    numerics = Numerics(draw=draw, logsumexp=native.logsumexp) if native_draw else MLX_OPS
    rng = np.random.default_rng(0)
    vocab, rows = 64, len(ROW_PARAMS)
    history = [rng.integers(0, vocab, 5).tolist() for _ in range(rows)]
    inputs = mx.array(rng.integers(0, vocab, rows), dtype=mx.uint32)
    with computing_with(numerics):
        for step in range(4):
            logits = mx.array(rng.normal(size=(rows, vocab)).astype(np.float32) * 3)
            contexts = [TokenBuffer(h) for h in history]
            processed, _ = process_rows(
                logits, inputs, [make_penalty_processors(p) for p in ROW_PARAMS], contexts
            )
            logprobs = log_normalize(processed)
            tokens = sample_rows([make_sampler(p) for p in ROW_PARAMS], logprobs).tolist()
            for e, (token, alone) in enumerate(rows_alone(logits, inputs, history)):
                assert tokens[e] == token, (step, e)
                assert np.array_equal(np.array(logprobs[e]), alone), (step, e)
