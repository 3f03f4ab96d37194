"""A forced custom tool with a regex on the embedded model (SmolLM2, real server over HTTP,
official SDK), on both APIs: the call's input matches the regex."""

from __future__ import annotations

import re

import pytest
from openai.types.chat import ChatCompletionCustomToolParam
from openai.types.responses import CustomToolParam

pytestmark = pytest.mark.slow

DATE = r"20[0-9]{2}-[01][0-9]-[0-3][0-9]"
QUESTION = "Book a table for the first of May 2025."


def test_chat_forced_custom_tool_with_a_regex(openai_client):
    tool = ChatCompletionCustomToolParam(
        type="custom",
        custom={
            "name": "book",
            "description": "Book a table on a date (YYYY-MM-DD).",
            "format": {"type": "grammar", "grammar": {"syntax": "regex", "definition": DATE}},
        },
    )
    reply = openai_client.chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": QUESTION}],
        tools=[tool],
        tool_choice={"type": "custom", "custom": {"name": "book"}},
        max_tokens=16,
        temperature=0,
    )
    (call,) = reply.choices[0].message.tool_calls
    assert call.type == "custom" and call.custom.name == "book"
    assert re.fullmatch(DATE, call.custom.input), call.custom.input
    assert reply.choices[0].finish_reason == "tool_calls"


def test_responses_forced_custom_tool_with_a_regex_streamed(openai_client):
    tool = CustomToolParam(
        type="custom",
        name="book",
        description="Book a table on a date (YYYY-MM-DD).",
        format={"type": "grammar", "syntax": "regex", "definition": DATE},
    )
    with openai_client.responses.stream(
        model="smollm2",
        input=QUESTION,
        tools=[tool],
        tool_choice={"type": "custom", "name": "book"},
        max_output_tokens=16,
        temperature=0,
    ) as events:
        deltas = [e.delta for e in events if e.type == "response.custom_tool_call_input.delta"]
        final = events.get_final_response()
    (item,) = final.output
    assert item.type == "custom_tool_call" and re.fullmatch(DATE, item.input), item.input
    assert "".join(deltas) == item.input
