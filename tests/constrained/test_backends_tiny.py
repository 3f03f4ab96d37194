"""Constrained decoding on tiny random-weight models: the constraint alone must guarantee form."""

from __future__ import annotations

import json

import jsonschema
import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.generate import generate_step
from mlx_lm.sample_utils import make_sampler
from tiny_models import build_tiny_model

from constrained.forcing import sample_ids
from vllm_mlx.constrained import (
    ConstraintError,
    Phase,
    build_logits_processors,
    from_response_format,
)
from vllm_mlx.families.catalog import REASONING_FORMATS

QWEN3 = REASONING_FORMATS["qwen3"]

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "count": {"type": "integer"},
        "kind": {"enum": ["a", "b", "c"]},
        "tags": {
            "type": "array",
            "items": {"type": "string", "maxLength": 6},
            "minItems": 1,
            "maxItems": 3,
        },
        "nested": {"$ref": "#/$defs/point"},
    },
    "required": ["name", "count", "kind", "tags"],
    "additionalProperties": False,
    "$defs": {
        "point": {
            "type": "object",
            "properties": {"x": {"type": "number"}, "y": {"type": "boolean"}},
            "required": ["x"],
            "additionalProperties": False,
        }
    },
}
BACKENDS = ["llguidance", "lm-format-enforcer"]


def schema_for(backend: str) -> dict:
    """SCHEMA, with enums for bounded strings on lm-format-enforcer (which cannot guarantee
    maxLength or pattern and rejects them)."""
    if backend == "llguidance":
        return SCHEMA
    text = json.dumps(SCHEMA)
    text = text.replace('"type": "string", "maxLength": 12', '"enum": ["ann", "bob"]')
    return json.loads(text.replace('"type": "string", "maxLength": 6', '"enum": ["x", "yz"]'))


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_tiny_model(tokenizer, seed=1)


def prompt_ids(tokenizer, **kwargs) -> list[int]:
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True, **kwargs
    )
    return tokenizer.encode(text, add_special_tokens=False)


def schema_format(schema):
    return {"type": "json_schema", "json_schema": {"name": "t", "schema": schema, "strict": True}}


@pytest.mark.parametrize("backend", BACKENDS)
def test_random_weights_always_produce_schema_valid_json(model, tokenizer, backend):
    prompt = prompt_ids(tokenizer)
    for seed in range(12):
        processors = build_logits_processors(
            tokenizer,
            constraint=from_response_format(schema_format(schema_for(backend))),
            backend=backend,
        )
        text = tokenizer.decode(sample_ids(model, tokenizer, prompt, processors, seed))
        jsonschema.validate(json.loads(text), schema_for(backend))
        assert processors[0].gave_up is None


def test_unconstrained_random_model_is_not_json(model, tokenizer):
    """Control for the test above: without the processor the output is not valid JSON."""
    prompt = prompt_ids(tokenizer)
    mx.random.seed(0)
    tokens = [t for t, _ in generate_step(mx.array(prompt), model, max_tokens=30)]
    with pytest.raises(json.JSONDecodeError):
        json.loads(tokenizer.decode(tokens))


@pytest.mark.parametrize("backend", ["llguidance"])
def test_json_object_gives_an_object(model, tokenizer, backend):
    processors = build_logits_processors(
        tokenizer, constraint=from_response_format({"type": "json_object"}), backend=backend
    )
    text = tokenizer.decode(sample_ids(model, tokenizer, prompt_ids(tokenizer), processors, 3, 300))
    assert isinstance(json.loads(text), dict)


def test_nothing_to_enforce_builds_no_processor(tokenizer):
    assert build_logits_processors(tokenizer) == []
    assert (
        build_logits_processors(tokenizer, constraint=from_response_format({"type": "text"})) == []
    )
    # A budget without a reasoning format has nothing to cut: never force <think> on a model.
    assert build_logits_processors(tokenizer, thinking_budget=5) == []
    # Thinking already closed by the template: a budget has nothing left to do.
    tail = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert (
        build_logits_processors(
            tokenizer, reasoning_format=QWEN3, prompt_tail=tail, thinking_budget=5
        )
        == []
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_unsupported_keyword_is_named(tokenizer, backend):
    schema = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    with pytest.raises(ConstraintError, match="uniqueItems"):
        build_logits_processors(
            tokenizer, constraint=from_response_format(schema_format(schema)), backend=backend
        )


def test_lmfe_rejects_lengths_it_cannot_guarantee(tokenizer):
    with pytest.raises(ConstraintError, match="maxLength"):
        build_logits_processors(
            tokenizer,
            constraint=from_response_format(schema_format(SCHEMA)),
            backend="lm-format-enforcer",
        )


@pytest.mark.parametrize(
    "bound",
    [{"minLength": 3}, {"maxLength": 4}, {"pattern": "^[a-c]+$"}],
    ids=["minLength", "maxLength", "pattern"],
)
def test_lmfe_rejects_what_it_cannot_enforce(tokenizer, bound):
    schema = {"type": "object", "properties": {"s": {"type": "string", **bound}}, "required": ["s"]}
    with pytest.raises(ConstraintError, match=next(iter(bound))) as info:
        build_logits_processors(
            tokenizer,
            constraint=from_response_format(schema_format(schema)),
            backend="lm-format-enforcer",
        )
    assert info.value.param == "response_format"


def test_auto_enforces_what_lmfe_cannot(model, tokenizer):
    """Under ``auto`` the same schemas go to llguidance, and the bounds hold."""
    schema = {
        "type": "object",
        "properties": {
            "s": {"type": "string", "minLength": 2, "maxLength": 4, "pattern": "^[a-c]+$"}
        },
        "required": ["s"],
        "additionalProperties": False,
    }
    prompt = prompt_ids(tokenizer)
    for seed in range(4):
        processors = build_logits_processors(
            tokenizer, constraint=from_response_format(schema_format(schema)), backend="auto"
        )
        value = json.loads(tokenizer.decode(sample_ids(model, tokenizer, prompt, processors, seed)))
        jsonschema.validate(value, schema)


def test_invalid_schema_reports_jsonschema_error(tokenizer):
    with pytest.raises(ConstraintError, match="invalid JSON schema"):
        build_logits_processors(
            tokenizer, constraint=from_response_format(schema_format({"type": "strin"}))
        )


def test_unknown_backend_is_rejected(tokenizer):
    with pytest.raises(ConstraintError, match="backend"):
        build_logits_processors(
            tokenizer, constraint=from_response_format({"type": "json_object"}), backend="x"
        )


def _allowed(processor, prompt: list[int], generated: list[int], vocab: int) -> np.ndarray:
    """Which tokens the processor leaves possible after ``generated``."""
    logits = processor(mx.array(prompt + generated), mx.zeros((1, vocab)))
    return np.isfinite(np.array(logits[0]))


@pytest.mark.parametrize("budget", [0, 1, 7])
def test_budget_forces_end_of_thinking_at_exactly_the_budget(model, tokenizer, budget):
    think_end = tokenizer.convert_tokens_to_ids("</think>")
    word = tokenizer.encode("a", add_special_tokens=False)[0]
    vocab = len(tokenizer._tokenizer)
    tail = "<|im_start|>assistant\n<think>\n"
    prompt = tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n" + tail, add_special_tokens=False)
    build = lambda: build_logits_processors(  # noqa: E731
        tokenizer, reasoning_format=QWEN3, prompt_tail=tail, thinking_budget=budget
    )[0]
    # The masks: free thinking before the budget, then </think> and nothing else.
    (processor,) = [build()]
    for thought in range(budget + 1):
        allowed = _allowed(processor, prompt, [word] * thought, vocab)
        if thought < budget:
            assert allowed[word] and allowed.sum() > 1, thought
        else:
            assert np.flatnonzero(allowed).tolist() == [think_end]
    # Sampling: the model may close early by itself, never later than the budget.
    for seed in range(3):
        processor = build()
        assert processor.state.phase in (Phase.THINKING, Phase.TRANSITIONING)
        mx.random.seed(seed)
        out = [
            t
            for t, _ in generate_step(
                mx.array(prompt),
                model,
                max_tokens=budget + 3,
                sampler=make_sampler(temp=1.0),
                logits_processors=[processor],
            )
        ]
        assert think_end in out and out.index(think_end) <= budget, (seed, out)


def test_multi_token_end_sequence_is_forced_token_by_token(model, tokenizer):
    """Families like Mistral close with several ordinary tokens: force them in order."""
    mistral = REASONING_FORMATS["mistral"]
    start, end = mistral.start, mistral.end
    assert (start, end) == ("[THINK]", "[/THINK]")
    end_ids = tokenizer.encode(end, add_special_tokens=False)
    assert len(end_ids) > 1
    prompt = tokenizer.encode("user: hi\nassistant: [THINK]", add_special_tokens=False)
    (processor,) = build_logits_processors(
        tokenizer,
        reasoning_format=mistral,
        prompt_tail="assistant: [THINK]",
        thinking_budget=4,
    )
    mx.random.seed(0)
    out = [
        t
        for t, _ in generate_step(
            mx.array(prompt),
            model,
            max_tokens=4 + len(end_ids) + 2,
            sampler=make_sampler(temp=1.0),
            logits_processors=[processor],
        )
    ]
    starts = [i for i in range(len(out)) if tuple(out[i : i + len(end_ids)]) == tuple(end_ids)]
    assert starts and starts[0] <= 4  # closed by the model itself, or forced at the budget


@pytest.mark.parametrize("backend", BACKENDS)
def test_thinking_then_schema_valid_content(model, tokenizer, backend):
    tail = "<|im_start|>assistant\n<think>\n"
    prompt = tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n" + tail, add_special_tokens=False)
    for seed in range(4):
        (processor,) = build_logits_processors(
            tokenizer,
            constraint=from_response_format(schema_format(schema_for(backend))),
            reasoning_format=QWEN3,
            prompt_tail=tail,
            thinking_budget=6,
            backend=backend,
        )
        text = tokenizer.decode(sample_ids(model, tokenizer, prompt, [processor], seed, 250))
        reasoning, _, content = text.partition("</think>")
        assert reasoning and "<think>" not in content and "</think>" not in content
        jsonschema.validate(json.loads(content), schema_for(backend))
        assert processor.gave_up is None


def test_model_that_never_opens_reasoning_is_not_forced_into_it(model, tokenizer):
    """IDLE start: with a budget but no opened block, output is never steered into thinking."""
    prompt = prompt_ids(tokenizer)
    think_start = tokenizer.convert_tokens_to_ids("<think>")
    (processor,) = build_logits_processors(
        tokenizer,
        constraint=from_response_format(schema_format(SCHEMA)),
        reasoning_format=QWEN3,
        prompt_tail="<|im_start|>assistant\n",
        thinking_budget=2,
    )
    assert processor.state.phase is Phase.IDLE
    # The first token may open a block or start the content: both are left possible.
    first = _allowed(processor, prompt, [], len(tokenizer._tokenizer))
    assert first[think_start] and first[tokenizer.encode("{", add_special_tokens=False)[0]]
    # This seed's model starts the content: no block is ever opened and the answer is valid.
    out = sample_ids(model, tokenizer, prompt, [processor], 5, 250)
    assert think_start not in out, tokenizer.decode(out)
    jsonschema.validate(json.loads(tokenizer.decode(out)), SCHEMA)


def _masked_logits(processor, prompt, generated, vocab):
    tokens = mx.array(prompt + generated)
    return processor(tokens, mx.zeros((1, vocab)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_rollback_restores_exact_state(model, tokenizer, backend):
    tail = "<|im_start|>assistant\n<think>\n"
    prompt = tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n" + tail, add_special_tokens=False)
    make = lambda: build_logits_processors(  # noqa: E731
        tokenizer,
        constraint=from_response_format(schema_format(schema_for(backend))),
        reasoning_format=QWEN3,
        prompt_tail=tail,
        thinking_budget=3,
        backend=backend,
    )[0]
    (reference,) = [make()]
    generated = sample_ids(model, tokenizer, prompt, [reference], 2, 250)
    vocab = len(tokenizer._tokenizer)

    processor = make()
    processor(mx.array(prompt), mx.zeros((1, vocab)))
    masks = [_masked_logits(processor, prompt, generated[:i], vocab) for i in range(len(generated))]
    states = [None] * len(generated)
    fresh = make()
    fresh(mx.array(prompt), mx.zeros((1, vocab)))
    for i in range(len(generated)):
        _masked_logits(fresh, prompt, generated[:i], vocab)
        states[i] = fresh.state
    # Roll back to several earlier points (and onto a different branch) and compare.
    for back in (len(generated) - 1, len(generated) // 2, 5, 2, 0):
        again = _masked_logits(processor, prompt, generated[:back], vocab)
        assert processor.state == states[back]
        assert mx.array_equal(again, masks[back])
        _masked_logits(processor, prompt, generated, vocab)
    assert processor.gave_up is None


def test_forced_token_rejected_gives_up_and_reports(tokenizer):
    """A token the constraint forbids (forced by someone else) stops constraining, visibly."""
    (processor,) = build_logits_processors(
        tokenizer, constraint=from_response_format({"type": "json_object"})
    )
    vocab = len(tokenizer._tokenizer)
    prompt = [1, 2, 3]
    processor(mx.array(prompt), mx.zeros((1, vocab)))
    bad = tokenizer.encode("x", add_special_tokens=False)
    logits = mx.arange(vocab, dtype=mx.float32)[None]
    out = processor(mx.array(prompt + bad), logits)
    assert processor.gave_up is not None and "content position 0" in processor.gave_up
    assert mx.array_equal(out, logits)
