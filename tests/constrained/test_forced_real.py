"""Constrained decoding on the real default model (SmolLM2-135M), through the real pipeline.

Unconstrained, this model never writes schema-valid JSON (it echoes the schema); every answer
here must validate. Greedy decoding, so each case is deterministic; schemas are small so a
valid answer fits in the token budget.
"""

from __future__ import annotations

import json

import jsonschema
import pytest

from vllm_mlx.constrained import from_response_format
from vllm_mlx.request import ChatRequest, Sampling
from vllm_mlx.runtime import build_runtime

pytestmark = pytest.mark.slow

NAME = {"type": "string", "maxLength": 12}
SCHEMAS = {
    "string": {"type": "object", "properties": {"answer": NAME}, "required": ["answer"]},
    "enum": {
        "type": "object",
        "properties": {"color": {"enum": ["red", "green", "blue"]}},
        "required": ["color"],
    },
    "const": {
        "type": "object",
        "properties": {"kind": {"const": "city"}, "name": NAME},
        "required": ["kind", "name"],
        "additionalProperties": False,
    },
    "ref_defs": {
        "type": "object",
        "properties": {"capital": {"$ref": "#/$defs/place"}},
        "required": ["capital"],
        "$defs": {
            "place": {
                "type": "object",
                "properties": {"name": NAME},
                "required": ["name"],
                "additionalProperties": False,
            }
        },
    },
    "any_of": {
        "type": "object",
        "properties": {"value": {"anyOf": [{"type": "integer"}, NAME]}},
        "required": ["value"],
        "additionalProperties": False,
    },
    "one_of": {
        "oneOf": [
            {
                "type": "object",
                "properties": {"count": {"type": "integer", "minimum": 0, "maximum": 99}},
                "required": ["count"],
                "additionalProperties": False,
            },
            {
                "type": "object",
                "properties": {"ok": {"type": "boolean"}},
                "required": ["ok"],
                "additionalProperties": False,
            },
        ]
    },
    "nested": {
        "type": "object",
        "properties": {
            "city": {
                "type": "object",
                "properties": {"name": NAME, "big": {"type": "boolean"}},
                "required": ["name", "big"],
                "additionalProperties": False,
            }
        },
        "required": ["city"],
        "additionalProperties": False,
    },
    "array_bounds": {
        "type": "object",
        "properties": {
            "tags": {
                "type": "array",
                "items": {"type": "string", "maxLength": 8},
                "minItems": 1,
                "maxItems": 3,
            }
        },
        "required": ["tags"],
        "additionalProperties": False,
    },
    "optional": {
        "type": "object",
        "properties": {
            "x": {"type": "integer", "minimum": -9, "maximum": 9},
            "note": {"type": "string", "maxLength": 10},
        },
        "required": ["x"],
        "additionalProperties": False,
    },
    "array_of_objects": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
            "required": ["n"],
            "additionalProperties": False,
        },
        "minItems": 2,
        "maxItems": 2,
    },
    "bool_number": {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "score": {"type": "number", "maximum": 10}},
        "required": ["ok", "score"],
        "additionalProperties": False,
    },
}
QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in JSON."}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 16},
                    "unit": {"enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Current time in a timezone",
            "parameters": {
                "type": "object",
                "properties": {"zone": {"type": "string", "maxLength": 16}},
                "required": ["zone"],
                "additionalProperties": False,
            },
        },
    },
]
WEATHER = [{"role": "user", "content": "What's the weather in Paris?"}]


@pytest.fixture(scope="module")
def pipeline():
    runtime = build_runtime(None, progress=False)
    yield runtime.pipeline
    runtime.close()


def run(pipeline, messages, max_tokens, **fields):
    request = ChatRequest(messages, Sampling(temperature=0), max_tokens=max_tokens, **fields)
    return pipeline.complete_sync(pipeline.prepare_chat(request))


def schema_format(schema):
    return {"type": "json_schema", "json_schema": {"name": "t", "schema": schema, "strict": True}}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_json_schema_answers_validate(pipeline, name):
    result = run(
        pipeline, QUESTION, 50, constraint=from_response_format(schema_format(SCHEMAS[name]))
    )
    assert result.finish_reason == "stop", result.message.content
    jsonschema.validate(json.loads(result.message.content), SCHEMAS[name])


def test_json_object_answer_is_an_object(pipeline):
    result = run(pipeline, QUESTION, 50, constraint=from_response_format({"type": "json_object"}))
    assert result.finish_reason == "stop", result.message.content
    assert isinstance(json.loads(result.message.content), dict)


def _calls(result):
    return [(c.name, json.loads(c.arguments)) for c in result.message.tool_calls]


SCHEMA_OF = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def test_tool_choice_required_makes_a_valid_call(pipeline):
    # One call: with parallel calls allowed this model keeps calling until max_tokens.
    result = run(
        pipeline, WEATHER, 40, tools=TOOLS, tool_choice="required", parallel_tool_calls=False
    )
    calls = _calls(result)
    assert calls and result.finish_reason == "tool_calls", result.message
    for name, arguments in calls:
        jsonschema.validate(arguments, SCHEMA_OF[name])


def test_tool_choice_named_calls_that_function(pipeline):
    choice = {"type": "function", "function": {"name": "get_time"}}
    result = run(pipeline, WEATHER, 40, tools=TOOLS, tool_choice=choice)
    calls = _calls(result)
    assert [name for name, _ in calls] == ["get_time"], result.message
    jsonschema.validate(calls[0][1], SCHEMA_OF["get_time"])


def test_tool_choice_none_makes_no_call(pipeline):
    result = run(pipeline, WEATHER, 20, tools=TOOLS, tool_choice="none")
    assert result.message.tool_calls == []
