"""Forced calls for pythonic, gemma4 and harmony: the real outputs of those families in
tests/tool_parsers/corpus (vLLM, SGLang, SMG, llama.cpp test data; sources in each line) are fed
token by token through the grammar under ``tool_choice: "required"``, with tools whose
parameter types come from the expected arguments; malformed calls are rejected."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import pytest

from constrained.forcing import accepts, matcher
from vllm_mlx.constrained import ConstraintError, build_logits_processors
from vllm_mlx.families.catalog import TOOL_CALL_FORMATS

CORPUS = Path(__file__).parent.parent / "tool_parsers" / "corpus"
# Real outputs the grammar does not take, and why (the parser still reads them).
NOT_FORCED = {
    "pythonic-smg-multiline": "forced calls are written compactly: no newlines between kwargs",
    "gemma4-vllm-incomplete": "the call is cut off: not a complete call",
    "gemma4-vllm-quoted-key": "forced calls write bare keys, as gemma4 does",
    "gemma4-vllm-nested-quoted-key": "forced calls write bare keys, as gemma4 does",
    "harmony-lcpp-final-analysis-call": "a final message before the call is content",
    "harmony-lcpp-parallel": "the source stripped the first call's <|call|> stop token",
}
HARMONY_CALL = "<|call|>"


def _schema(value) -> dict:
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if value is None:
        return {"type": "null"}
    return {}  # lists and objects: any literal


def _tools(calls: list[dict]) -> list[dict]:
    tools = {}
    for call in calls:
        props = {k: _schema(v) for k, v in call["arguments"].items()}
        parameters = {"type": "object", "properties": props, "required": list(props)}
        tools[call["name"]] = {
            "type": "function",
            "function": {"name": call["name"], "parameters": parameters},
        }
    return list(tools.values())


def cases(family: str) -> list[tuple[str, str, list[dict]]]:
    out = []
    for line in (CORPUS / f"{family}.jsonl").read_text().splitlines():
        case = json.loads(line)
        expected = case["expected"]
        if expected["tool_calls"] and not expected["content"] and case["id"] not in NOT_FORCED:
            text = case["text"]
            if family == "harmony" and not text.endswith(HARMONY_CALL):
                text += HARMONY_CALL  # the source stripped the stop token
            out.append((case["id"], text, _tools(expected["tool_calls"])))
    return out


@pytest.mark.parametrize("family", ["pythonic", "gemma4", "harmony"])
def test_real_outputs_are_accepted_token_by_token(tokenizer, family):
    found = cases(family)
    assert len(found) >= 8
    for case_id, text, tools in found:
        assert accepts(tokenizer, matcher(tokenizer, family, tools=tools), text), case_id


def test_rendered_calls_are_accepted(tokenizer):
    tools = _tools([{"name": "get_weather", "arguments": {"city": "x", "days": 1}}])
    args = {"city": 'Paris, "FR"', "days": 3}
    for family in ("pythonic", "gemma4"):
        fmt = TOOL_CALL_FORMATS[family]
        for variant in (fmt, *fmt.variants):
            text = variant.render_calls([("get_weather", args)])
            assert accepts(tokenizer, matcher(tokenizer, family, tools=tools), text), text


WEATHER = _tools([{"name": "get_weather", "arguments": {"city": "x", "days": 1}}])
MALFORMED = {
    "pythonic": [
        'Sure: [get_weather(city="a", days=1)]',  # content before the call
        '[get_weather(city="a", days="one")]',  # wrong type
        '[get_weather(days=1, city="a")]',  # schema order
        '[get_weather(city="a")]',  # a required argument missing
        '[other(city="a", days=1)]',  # not a tool
        '[get_weather(city="a", days=1)',  # never closed
    ],
    "gemma4": [
        '<|tool_call>call:get_weather{city:<|"|>a<|"|>,days:x}<tool_call|>',
        "<|tool_call>call:nope{}<tool_call|>",
        '<|tool_call>call:get_weather{city:<|"|>a<|"|>,days:1}',
    ],
    "harmony": [
        "<|channel|>final<|message|>hello<|return|>",
        " to=functions.nope<|channel|>commentary<|message|>{}<|call|>",
        ' to=functions.get_weather<|channel|>commentary<|message|>{"city": 1, "days": 1}<|call|>',
    ],
}


@pytest.mark.parametrize("family", sorted(MALFORMED))
def test_malformed_calls_are_rejected(tokenizer, family):
    for text in MALFORMED[family]:
        assert not accepts(tokenizer, matcher(tokenizer, family, tools=WEATHER), text), text


def test_named_and_single_call(tokenizer):
    named = {"type": "function", "function": {"name": "get_weather"}}
    one = '[get_weather(city="a", days=1)]'
    two = '[get_weather(city="a", days=1), get_weather(city="b", days=2)]'
    assert accepts(tokenizer, matcher(tokenizer, "pythonic", named, WEATHER), one)
    assert not accepts(tokenizer, matcher(tokenizer, "pythonic", named, WEATHER), two)
    assert not accepts(
        tokenizer, matcher(tokenizer, "pythonic", tools=WEATHER, parallel=False), two
    )


def test_unexpressible_string_bounds_are_refused(tokenizer):
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {
                    "type": "object",
                    "properties": {"s": {"type": "string", "pattern": "a+"}},
                },
            },
        }
    ]
    for family in ("pythonic", "gemma4"):
        with pytest.raises(ConstraintError, match="pattern"):
            matcher(tokenizer, family, tools=tools)


def test_tool_choice_none_bans_a_single_token_call_opener(tokenizer):
    opener = tokenizer._tokenizer.convert_tokens_to_ids("<tool_call>")
    (ban,) = build_logits_processors(
        tokenizer, tool_choice="none", tool_format=TOOL_CALL_FORMATS["hermes"]
    )
    vocab = len(tokenizer._tokenizer)
    out = ban(mx.array([1, 2]), mx.zeros((1, vocab)))
    assert out[0, opener].item() == float("-inf") and out[0, opener + 1].item() == 0
    # a multi-token opener (pythonic's "[") is ordinary text: nothing is banned
    assert (
        build_logits_processors(
            tokenizer, tool_choice="none", tool_format=TOOL_CALL_FORMATS["pythonic"]
        )
        == []
    )
