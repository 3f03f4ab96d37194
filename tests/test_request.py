"""The protocol-neutral request and the decisions the pipeline makes once for every surface:
tool_choice validation, the max_tokens policy, sampling over the server's defaults, errors
naming their field. A tiny tokenizer and a replay engine: no model, no sockets."""

from __future__ import annotations

import dataclasses

import pytest
from tiny_models import build_tiny_tokenizer

from vllm_mlx.constrained import Constraint
from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.sampling import SamplingParams
from vllm_mlx.engine.sources import ReplayBatchSource
from vllm_mlx.families.catalog import REASONING_FORMATS, TOOL_CALL_FORMATS
from vllm_mlx.options import RuntimeOptions
from vllm_mlx.pipeline import Pipeline
from vllm_mlx.request import ChatRequest, RequestError, Sampling, Thinking, check_tool_choice

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def pipeline():
    tokenizer = build_tiny_tokenizer()
    engine = Engine(ReplayBatchSource([tokenizer.eos_token_id]), tokenizer)
    yield Pipeline(
        engine,
        context_length=2048,
        options=RuntimeOptions.of(max_tokens=4000),
        reasoning_format=REASONING_FORMATS["deepseek_r1"],
        tool_format=TOOL_CALL_FORMATS["hermes"],
        sampling_defaults=SamplingParams(temperature=0.3, top_p=0.9),
    )
    engine.close()


@pytest.mark.parametrize(
    "choice,tools,ok",
    [
        (None, None, True),
        ("auto", None, True),
        ("none", TOOLS, True),
        ("required", TOOLS, True),
        ("required", None, False),
        ({"type": "function", "function": {"name": "f"}}, TOOLS, True),
        ({"type": "function", "function": {"name": "g"}}, TOOLS, False),
        ({"type": "function"}, TOOLS, False),
        ("sometimes", TOOLS, False),
    ],
)
def test_tool_choice_is_validated_once_with_its_param(choice, tools, ok):
    if ok:
        check_tool_choice(choice, tools)
        return
    with pytest.raises(RequestError) as caught:
        check_tool_choice(choice, tools)
    assert caught.value.param == "tool_choice"


def test_sampling_fields_over_the_server_defaults():
    defaults = SamplingParams(temperature=0.3, top_p=0.9, top_k=20, repetition_penalty=1.1)
    resolved = Sampling(temperature=0, top_k=-1, stop=["x"]).resolve(defaults, max_tokens=7)
    assert (resolved.temperature, resolved.top_p, resolved.top_k) == (0, 0.9, 0)
    assert (resolved.repetition_penalty, resolved.max_tokens, resolved.stop) == (1.1, 7, ["x"])


def test_every_client_sampling_field_reaches_the_sampler():
    """``Sampling`` holds the decided fields but ``max_tokens`` (a request's own field), and
    ``resolve`` carries each one set over any default."""
    client = {f.name for f in dataclasses.fields(Sampling)}
    assert client == {f.name for f in dataclasses.fields(SamplingParams)} - {"max_tokens"}
    asked = Sampling(
        temperature=0.5,
        top_p=0.7,
        top_k=3,
        min_p=0.2,
        repetition_penalty=1.3,
        presence_penalty=0.4,
        frequency_penalty=0.6,
        logit_bias={5: -1.0},
        seed=11,
        stop=["end"],
        stop_token_ids=[2],
        logprobs=True,
        top_logprobs=4,
    )
    resolved = asked.resolve(SamplingParams(temperature=0.1, top_k=40), max_tokens=9)
    assert {name: getattr(resolved, name) for name in client} == vars(asked)
    assert resolved.max_tokens == 9


def test_max_tokens_policies(pipeline):
    room = pipeline.context_length - len(pipeline.render(ChatRequest(HI))[0].token_ids)

    def fitted(**fields) -> int:
        return pipeline.prepare_chat(ChatRequest(HI, **fields)).generation.params.max_tokens

    assert fitted() == room  # the default (4000), cut to the context
    assert fitted(max_tokens=5) == 5
    assert fitted(max_tokens=32000, max_tokens_policy="cap") == room
    with pytest.raises(RequestError) as caught:
        fitted(max_tokens=room + 1)
    assert caught.value.param == "max_tokens"


def test_pipeline_applies_the_sampling_defaults(pipeline):
    params = pipeline.prepare_chat(ChatRequest(HI, Sampling(top_p=0.5))).generation.params
    assert (params.temperature, params.top_p) == (0.3, 0.5)


@pytest.mark.parametrize(
    "fields,param",
    [
        (
            {"constraint": Constraint("json_schema", {"type": 3})},
            "response_format",
        ),
        ({"constraint": Constraint("regex", "[0-9", "guided_regex")}, "guided_regex"),
        ({"tools": TOOLS, "tool_choice": "required"}, None),  # enforceable: no error
        ({"tool_choice": "required"}, "tool_choice"),
        ({"thinking": Thinking(budget=-1)}, "thinking_token_budget"),
        ({"thinking": Thinking(effort="enormous")}, "reasoning_effort"),
    ],
)
def test_errors_carry_their_own_param(pipeline, fields, param):
    request = ChatRequest(HI, **fields)
    if param is None:
        pipeline.prepare_chat(request)
        return
    with pytest.raises(RequestError) as caught:
        pipeline.prepare_chat(request)
    assert caught.value.param == param


def test_the_thinking_switch_is_rendered_under_the_templates_key(pipeline):
    """The tiny template reads ``enable_thinking``; effort "none" closes the block."""
    on, _ = pipeline.render(ChatRequest(HI))
    off, decision = pipeline.render(ChatRequest(HI, thinking=Thinking(effort="none")))
    assert decision.template_kwargs == {"enable_thinking": False}
    assert off.tail.endswith("</think>\n\n") and not on.tail.endswith("</think>\n\n")
