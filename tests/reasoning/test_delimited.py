"""Reasoning parsers: complete, truncated and absent blocks, prompt tails, and the hand-off
to tool parsing."""

from __future__ import annotations

import pytest
from parser_cases import assert_same_in_every_mode, calls_of, shape

from vllm_mlx.families.catalog import REASONING_FORMATS

DELIMITED = [n for n in REASONING_FORMATS if n != "harmony"]


@pytest.mark.parametrize("name", DELIMITED)
def test_complete_block(name):
    fmt = REASONING_FORMATS[name]
    text = f"{fmt.start}Let me think: 2+2.{fmt.end}\n\nIt is 4."
    msg = assert_same_in_every_mode(text, reasoning=name)
    assert shape(msg) == ("Let me think: 2+2.", "It is 4.", [])


@pytest.mark.parametrize("name", DELIMITED)
def test_truncated_block_is_all_reasoning(name):
    fmt = REASONING_FORMATS[name]
    msg = assert_same_in_every_mode(f"{fmt.start}still thinking {fmt.end[:3]}", reasoning=name)
    assert shape(msg) == (f"still thinking {fmt.end[:3]}", None, [])


@pytest.mark.parametrize("name", DELIMITED)
def test_absent_block(name):
    msg = assert_same_in_every_mode("Just an answer.", reasoning=name)
    opened = REASONING_FORMATS[name].starts_in_reasoning
    expected = ("Just an answer.", None) if opened else (None, "Just an answer.")
    assert shape(msg)[:2] == expected


def test_prompt_tail_opened_block_without_opening_tag():
    tail = "<|im_start|>assistant\n<think>\n"
    msg = assert_same_in_every_mode("hmm</think>\n\nAnswer", reasoning="qwen3", prompt_tail=tail)
    assert shape(msg) == ("hmm", "Answer", [])


def test_prompt_tail_with_closed_block_starts_in_content():
    tail = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    msg = assert_same_in_every_mode("Answer", reasoning="deepseek_r1", prompt_tail=tail)
    assert shape(msg) == (None, "Answer", [])


def test_deepseek_r1_redundant_opening_tag_is_dropped():
    msg = assert_same_in_every_mode("<think>\nx</think>y", reasoning="deepseek_r1")
    assert shape(msg) == ("\nx", "y", [])


def test_tool_syntax_inside_reasoning_is_not_a_call_then_real_call():
    text = (
        '<think>I could write <tool_call>{"name": "x", "arguments": {}}</tool_call></think>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
    )
    msg = assert_same_in_every_mode(text, "hermes", "qwen3")
    assert "<tool_call>" in msg.reasoning_content
    assert calls_of(msg) == [("get_weather", {"city": "Rome"})]
    assert msg.content is None


def test_tag_mentioned_later_in_content_stays_content():
    msg = assert_same_in_every_mode("Use the <think> tag.", reasoning="qwen3")
    assert shape(msg) == (None, "Use the <think> tag.", [])


def test_harmony_reasoning_without_tool_parser_keeps_calls_as_content():
    text = "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>final<|message|>b"
    msg = assert_same_in_every_mode(text, reasoning="gpt-oss", prompt_tail="<|start|>assistant")
    assert shape(msg) == ("a", "b", [])
