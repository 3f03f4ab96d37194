"""The continuously batched engine on a tiny random-weight model: per-request samplers,
constraints and stops inside one batch, cancellation, the prefix cache, back-pressure."""

from __future__ import annotations

import json
import threading

import jsonschema
import pytest
from tiny_models import build_tiny_model

from vllm_mlx.constrained import build_logits_processors, from_response_format
from vllm_mlx.engine.engine import Engine, QueueFullError
from vllm_mlx.engine.generation import GenerationChunk, GenerationError, GenerationRequest
from vllm_mlx.engine.prefix_cache import PrefixCache
from vllm_mlx.engine.sampling import SamplingParams
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.families.catalog import REASONING_FORMATS

SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "required": ["n"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_tiny_model(tokenizer, seed=3)


def make_engine(model, tokenizer, *, cache_mb=0, **kwargs) -> Engine:
    cache = PrefixCache(cache_mb * 2**20) if cache_mb else None
    return Engine(ModelBatchSource(model, prefix_cache=cache), tokenizer, **kwargs)


def run(engine, prompt, **params):
    processors = params.pop("processors", [])
    chunks = list(
        engine.generate_sync(GenerationRequest(prompt, SamplingParams(**params), processors))
    )
    return "".join(c.text for c in chunks), chunks[-1], [t for c in chunks for t in c.token_ids]


def in_parallel(jobs):
    results = [None] * len(jobs)

    def go(i):
        results[i] = jobs[i]()

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_seeded_requests_match_alone_and_in_a_batch(model, tokenizer):
    engine = make_engine(model, tokenizer)
    prompt = tokenizer.encode("hello there")
    alone = run(engine, prompt, max_tokens=16, temperature=1.0, seed=7)
    batch = in_parallel(
        [
            lambda: run(engine, prompt, max_tokens=16, temperature=1.0, seed=7),
            lambda: run(
                engine, tokenizer.encode("another prompt"), max_tokens=9, temperature=0.7, seed=1
            ),
            lambda: run(engine, prompt, max_tokens=16, temperature=0),
            lambda: run(engine, prompt, max_tokens=16, temperature=1.0, seed=7),
        ]
    )
    assert batch[0][0] == alone[0] == batch[3][0]
    assert batch[1][1].completion_tokens <= 9
    engine.close()


def test_different_constraints_in_one_batch(model, tokenizer):
    engine = make_engine(model, tokenizer, max_num_seqs=4)
    chat = tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    thinking_tail = "<|im_start|>assistant\n<think>\n"
    thinking_prompt = tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n" + thinking_tail)
    # the budget and free requests must not end by a sampled end of turn, whatever the seed
    # draws from the random model: what they check needs their tokens
    no_end = {eos: -1e9 for eos in tokenizer.eos_token_ids}

    def schema_request():
        processors = build_logits_processors(
            tokenizer,
            constraint=from_response_format(
                {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}}
            ),
        )
        return run(engine, chat, max_tokens=40, temperature=1.0, seed=5, processors=processors)

    def budget_request():
        processors = build_logits_processors(
            tokenizer,
            reasoning_format=REASONING_FORMATS["qwen3"],
            prompt_tail=thinking_tail,
            thinking_budget=4,
        )
        return run(
            engine,
            thinking_prompt,
            max_tokens=12,
            temperature=1.0,
            seed=6,
            logit_bias=no_end,
            processors=processors,
        )

    def free_request():
        return run(engine, chat, max_tokens=12, temperature=1.0, seed=8, logit_bias=no_end)

    schema_out, budget_out, free_out = in_parallel([schema_request, budget_request, free_request])
    jsonschema.validate(json.loads(schema_out[0]), SCHEMA)
    assert schema_out[1].finish_reason == "stop"
    think_end = tokenizer.convert_tokens_to_ids("</think>")
    assert think_end in budget_out[2]
    assert budget_out[2].index(think_end) <= 4  # at most 4 reasoning tokens, then </think>
    assert free_out[1].completion_tokens == 12
    engine.close()


def test_cancelled_request_leaves_the_others_untouched(model, tokenizer):
    engine = make_engine(model, tokenizer)
    prompt = tokenizer.encode("steady")
    expected = run(engine, prompt, max_tokens=30, temperature=0)[0]

    def cancelled():
        stream = engine.generate_sync(
            GenerationRequest(prompt, SamplingParams(max_tokens=10_000, temperature=0))
        )
        got = [next(stream) for _ in range(3)]
        stream.close()  # the consumer leaves: the request is cancelled
        return got

    results = in_parallel(
        [
            lambda: run(engine, prompt, max_tokens=30, temperature=0),
            cancelled,
            lambda: run(engine, prompt, max_tokens=30, temperature=0),
        ]
    )
    assert results[0][0] == expected == results[2][0]
    assert len(results[1]) == 3
    for _ in range(100):
        if engine.running == 0:
            break
        threading.Event().wait(0.05)
    assert engine.running == 0
    engine.close()


def test_prefix_cache_reuses_without_changing_output(model, tokenizer):
    prompt = tokenizer.encode("a shared system prompt that agents send on every turn " * 8)
    plain = make_engine(model, tokenizer)
    cached = make_engine(model, tokenizer, cache_mb=64)
    reference = run(plain, prompt, max_tokens=12, temperature=0)
    first = run(cached, prompt, max_tokens=12, temperature=0)
    second = run(cached, prompt, max_tokens=12, temperature=0)
    longer = run(cached, prompt + tokenizer.encode(" and more"), max_tokens=12, temperature=0)
    assert first[1].cached_tokens == 0
    assert second[1].cached_tokens == len(prompt) - 1
    assert longer[1].cached_tokens >= len(prompt) - 1
    assert reference[0] == first[0] == second[0]
    assert (
        longer[0]
        == run(plain, prompt + tokenizer.encode(" and more"), max_tokens=12, temperature=0)[0]
    )
    plain.close()
    cached.close()


def test_queue_limit_raises(model, tokenizer):
    engine = make_engine(model, tokenizer, max_num_seqs=1, max_queue=1)
    prompt = tokenizer.encode("x")
    long = SamplingParams(max_tokens=10_000, temperature=0)
    running = engine.generate_sync(GenerationRequest(prompt, long))
    next(running)  # generating now
    engine._submit(GenerationRequest(prompt, long), lambda chunk: None)  # waits its turn
    with pytest.raises(QueueFullError):
        engine._submit(GenerationRequest(prompt, long), lambda chunk: None)
    running.close()
    engine.close()


def test_a_failing_processor_fails_its_batch_not_the_engine(model, tokenizer):
    engine = make_engine(model, tokenizer)
    prompt = tokenizer.encode("x")

    def broken(tokens, logits):
        raise RuntimeError("injected fault")

    _, last, _ = run(engine, prompt, max_tokens=5, processors=[broken])
    assert last.finish_reason == "error" and isinstance(last.error, GenerationError)
    assert "injected fault" in str(last.error)
    _, last, _ = run(engine, prompt, max_tokens=5, temperature=0)
    assert last.finish_reason == "length" and last.completion_tokens == 5
    engine.close()


def test_running_streams_keep_producing_while_a_long_prompt_prefills(model, tokenizer):
    engine = Engine(ModelBatchSource(model, prefill_step_size=64), tokenizer)
    events: list[tuple[str, GenerationChunk]] = []  # in the order the engine emitted them
    first = GenerationRequest(tokenizer.encode("go"), SamplingParams(max_tokens=60, temperature=0))
    engine._submit(first, lambda chunk: events.append(("running", chunk)))
    while not events:
        threading.Event().wait(0.01)
    long_prompt = tokenizer.encode("a long shared document " * 120)  # many prefill chunks
    assert len(long_prompt) > 8 * 64
    submitted_at = len(events)
    engine._submit(
        GenerationRequest(long_prompt, SamplingParams(max_tokens=2)),
        lambda chunk: events.append(("long", chunk)),
    )
    while not any(tag == "long" and c.finish_reason for tag, c in events):
        threading.Event().wait(0.01)
    first_long = next(i for i, (tag, _) in enumerate(events) if tag == "long")
    interleaved = [tag for tag, _ in events[submitted_at:first_long] if tag == "running"]
    # one prefill chunk per engine step: the running stream got tokens in between
    assert len(interleaved) >= len(long_prompt) // 64 - 2
    engine.close()
