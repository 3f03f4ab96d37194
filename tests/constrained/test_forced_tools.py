"""Forced tool calls: grammar and parser agree on every family, and random weights still call.

The call texts come from the parser tests (tests/families/test_tool_families.py): rendered
calls for every family and variant, and the recorded real-model outputs. Each is fed token by
token through the constraint's matcher and must be accepted and complete (EOS allowed).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest
from tiny_models import build_tiny_model

from vllm_mlx.constrained import ConstraintError, build_logits_processors, from_response_format
from vllm_mlx.families.catalog import TOOL_CALL_FORMATS

sys.path.insert(0, str(Path(__file__).parent.parent / "families"))
from parser_cases import WEATHER_TOOLS, parse  # noqa: E402
from test_tool_families import CALLS  # noqa: E402

from constrained.forcing import SCHEMAS, TOOLS, accepts, matcher, sample  # noqa: E402

# Literal dialects and Harmony: tests/constrained/test_forced_families.py (their grammars
# write strings without "<" or raw newlines, so this file's rendered CALLS do not apply).
OWN_TESTS = {"pythonic", "gemma4", "harmony"}
FAMILIES = [n for n in TOOL_CALL_FORMATS if n not in OWN_TESTS]
XML_FAMILIES = [n for n in FAMILIES if TOOL_CALL_FORMATS[n].dialect.name == "xml"]

# Real outputs from the parser tests (the call part: a forced call starts at once).
REAL_OUTPUTS = {
    "hermes": [
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 12}}\n'
        '</tool_call>\n<tool_call>\n{"name": "noop", "arguments": {}}\n</tool_call>'
    ],
    # As in the parser test, minus its deliberately mistyped values ("not json" for an
    # object, an undeclared key) and with the JSON literal `true`: the grammar forces valid
    # JSON literals where the parser is lenient.
    "qwen3_coder": [
        "<tool_call>\n<function=get_weather>\n"
        '<parameter=city>\n  01234 &amp; {"x": 1}\n</parameter>\n'
        "<parameter=days>\n7\n</parameter>\n<parameter=scale>\n1.5\n</parameter>\n"
        '<parameter=metric>\ntrue\n</parameter>\n<parameter=tags>\n[1, "x"]\n</parameter>\n'
        "<parameter=zip>\n007\n</parameter>\n</function>\n</tool_call>"
    ],
    "glm45": [
        "<tool_call>get_weather\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
        "<tool_call>get_weather<arg_key>days</arg_key><arg_value>2</arg_value></tool_call>",
    ],
    "kimi_k2": [
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.noop:3"
        '<|tool_call_argument_begin|>{"repo": "."}<|tool_call_end|><|tool_calls_section_end|>'
    ],
    "mistral": [
        '[TOOL_CALLS] [{"name": "noop", "arguments": {}}]',
        '[TOOL_CALLS]noop[ARGS]{}[TOOL_CALLS]get_weather[ARGS]{"days": 1}',
    ],
    "llama3_json": [
        '{"name": "noop", "parameters": {}}; {"name": "get_weather", "parameters": {"days": 1}}'
    ],
    "deepseek_v3": [
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
        '```json\n{"city": "Hangzhou"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    ],
    "minimax_m2": [
        '<minimax:tool_call>\n<invoke name="get_weather">\n'
        '<parameter name="days">4</parameter>\n<parameter name="zip">04</parameter>\n'
        "</invoke>\n</minimax:tool_call>"
    ],
}


@pytest.mark.parametrize("family", FAMILIES)
def test_rendered_calls_of_every_variant_are_accepted(tokenizer, family):
    fmt = TOOL_CALL_FORMATS[family]
    for variant in (fmt, *fmt.variants):
        for calls in (CALLS[:1], CALLS):
            constraint = matcher(tokenizer, family)
            assert accepts(tokenizer, constraint, variant.render_calls(calls)), (variant, calls)
            assert constraint.gave_up is None


@pytest.mark.parametrize("family", sorted(REAL_OUTPUTS))
def test_real_model_outputs_are_accepted_and_parse_back(tokenizer, family):
    for text in REAL_OUTPUTS[family]:
        assert accepts(tokenizer, matcher(tokenizer, family), text), text
        message = parse(text, family, tools=WEATHER_TOOLS)
        assert message.tool_calls and not message.content


def test_special_markers_are_forced_as_special_tokens(tokenizer):
    """`<tool_call>` is one special token here: spelling it in plain text is rejected."""
    constraint = matcher(tokenizer, "hermes")
    text = '<tool_call>\n{"name": "noop", "arguments": {}}\n</tool_call>'
    spelled = [tokenizer._tokenizer.convert_tokens_to_ids(c) for c in "<tool_call>"]
    assert None not in spelled
    first = constraint.allowed_mask([])
    assert first[tokenizer._tokenizer.convert_tokens_to_ids("<tool_call>")]
    assert not first[spelled[0]]
    assert accepts(tokenizer, matcher(tokenizer, "hermes"), text)


MALFORMED = {
    "hermes": [
        'Let me check.\n<tool_call>\n{"name": "noop", "arguments": {}}\n</tool_call>',
        '<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>',
        '<tool_call>\n{"name": "get_weather", "arguments": {"days": "x"}}\n</tool_call>',
        '<tool_call>\n{"name": "f", "arguments": {"a": 1]}\n</tool_call>',
        '<tool_call>\n{"name": "noop", "arguments": {}}',  # never closed
        "<tool_call>\nnot json at all\n</tool_call>",
    ],
    "qwen3_coder": [
        "<tool_call>\n<function=get_weather>\n<parameter=days>\nseven\n</parameter>\n"
        "</function>\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=extra>\n5\n</parameter>\n"
        "</function>\n</tool_call>",
    ],
    "mistral": ["[TOOL_CALLS]nope[ARGS]{}", '[TOOL_CALLS] [{"name": "noop", "arguments": 1}]'],
    "kimi_k2": [
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.noop"
        "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>"
    ],
    "minimax_m2": [
        '<minimax:tool_call>\n<invoke name="get_weather">\n'
        '<parameter name="days">four</parameter>\n</invoke>\n</minimax:tool_call>'
    ],
    "seed_oss": [
        "<seed:tool_call>\n<function=get_weather>\n<parameter=days>x</parameter>\n"
        "</function>\n</seed:tool_call>"
    ],
    "deepseek_v32": [
        '<｜DSML｜function_calls>\n<｜DSML｜invoke name="nope">\n</｜DSML｜invoke>\n'
        "</｜DSML｜function_calls>"
    ],
    "nemotron": ['<TOOLCALL>[{"name": "get_weather", "arguments": {"days": "x"}}]</TOOLCALL>'],
    "command_r": [
        '<|START_ACTION|>[\n{"tool_call_id": "0", "tool_name": "nope", "parameters": {}}'
        "\n]<|END_ACTION|>"
    ],
    "lfm2": ["<|tool_call_start|>\n[get_weather(days='x')]\n<|tool_call_end|>"],
    "functionary_v3": ['>>>get_weather\n{"days": "x"}'],
    "apertus": ['<|tools_prefix|>[{"nope": {}}]<|tools_suffix|>'],
}


@pytest.mark.parametrize("family", sorted(MALFORMED))
def test_malformed_calls_are_rejected(tokenizer, family):
    for text in MALFORMED[family]:
        assert not accepts(tokenizer, matcher(tokenizer, family), text), text


def test_named_choice_and_parallel_false(tokenizer):
    fmt = TOOL_CALL_FORMATS["hermes"]
    named = {"type": "function", "function": {"name": "noop"}}
    assert accepts(tokenizer, matcher(tokenizer, "hermes", named), fmt.render_calls(CALLS[1:]))
    assert not accepts(tokenizer, matcher(tokenizer, "hermes", named), fmt.render_calls(CALLS[:1]))
    assert not accepts(
        tokenizer, matcher(tokenizer, "hermes", named), fmt.render_calls([CALLS[1], CALLS[1]])
    )
    single = matcher(tokenizer, "hermes", parallel=False)
    assert not accepts(tokenizer, single, fmt.render_calls(CALLS))
    assert accepts(
        tokenizer, matcher(tokenizer, "hermes", parallel=False), fmt.render_calls(CALLS[:1])
    )


def test_unenforceable_requests_are_refused_by_name(tokenizer):
    with pytest.raises(ConstraintError, match="not in tools"):
        matcher(tokenizer, "hermes", {"type": "function", "function": {"name": "x"}})
    with pytest.raises(ConstraintError, match="tool-call format"):
        build_logits_processors(tokenizer, tool_choice="required", tools=WEATHER_TOOLS)
    untyped = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {
                    "type": "object",
                    "properties": {"p": {"$ref": "#/$defs/x"}},
                    "$defs": {"x": {"type": "integer"}},
                },
            },
        }
    ]
    with pytest.raises(ConstraintError, match="declares none"):
        matcher(tokenizer, "qwen3_coder", tools=untyped)


def test_auto_choice_is_unconstrained_unless_a_schema_is_given(tokenizer):
    assert (
        build_logits_processors(
            tokenizer,
            tool_choice="auto",
            tools=WEATHER_TOOLS,
            tool_format=TOOL_CALL_FORMATS["hermes"],
        )
        == []
    )
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    (processor,) = build_logits_processors(
        tokenizer,
        tool_choice="auto",
        tools=WEATHER_TOOLS,
        tool_format=TOOL_CALL_FORMATS["hermes"],
        constraint=from_response_format(
            {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
        ),
    )
    assert accepts(tokenizer, processor.constraint, '{"a": 1}')
    call = TOOL_CALL_FORMATS["hermes"].render_calls(CALLS[1:])
    assert accepts(tokenizer, matcher(tokenizer, "hermes"), call)


# -- random weights: the constraint alone makes a call the parser reads back ----------------


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_tiny_model(tokenizer, seed=3)


# Seeds per family: four for the first families; one for the rest, whose free-form strings
# let random weights run past the token budget on other seeds (no EOS is then a test failure).
SEEDS = dict.fromkeys(
    ("hermes", "qwen3_coder", "glm45", "minimax_m2", "kimi_k2", "mistral", "llama3_json"),
    range(4),
) | dict.fromkeys(
    ("seed_oss", "step3", "step3p5", "poolside_v1", "nemotron", "apriel", "phi4_mini", "xlam")
    + ("lfm2", "apertus", "deepseek_v32", "command_r", "functionary_v3", "functionary_v31")
    + ("minimax_m3",),
    range(1),
)


@pytest.mark.parametrize("family", SEEDS)
@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "get_weather"}}]
)
def test_random_weights_make_calls_the_parser_reads_back(model, tokenizer, family, choice):
    for seed in SEEDS[family]:
        # One call: with parallel calls allowed, random weights rarely choose EOS over
        # another call (the multi-call grammar is covered by the matcher tests above).
        processors = build_logits_processors(
            tokenizer,
            tool_choice=choice,
            tools=TOOLS,
            tool_format=TOOL_CALL_FORMATS[family],
            parallel_tool_calls=False,
        )
        text = sample(model, tokenizer, processors, seed)
        message = parse(text, family, tools=TOOLS)
        assert message.tool_calls, text
        assert not message.content, text
        if isinstance(choice, dict):
            assert [c.name for c in message.tool_calls] == ["get_weather"]
        for call in message.tool_calls:
            jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
        assert processors[0].gave_up is None
