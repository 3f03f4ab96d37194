"""A Hermes call missing its wrapper's closing brace (small models drop it) is recovered as a
call, and its ``</tool_call>`` marker is markup, not content (Claude Code would show it),
whole and streamed character by character."""

from __future__ import annotations

import pytest

from vllm_mlx.chat.stream import make_output_stream
from vllm_mlx.tool_parsers import ToolParserManager

TOOLS = [{"type": "function", "function": {"name": "Bash", "parameters": {"type": "object"}}}]
CALL = '<tool_call>\n{"name": "Bash", "arguments": {"command": "echo hi"}'


def parsed(text: str, chunked: bool):
    stream = make_output_stream(
        reasoning_format=None,
        tool_format=ToolParserManager.format("hermes"),
        tools=TOOLS,
        prompt_tail="",
    )
    for piece in text if chunked else [text]:
        stream.feed(piece)
    stream.finish()
    return stream.message


@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize(
    "text,content",
    [
        (CALL + "\n</tool_call>", ""),  # the brace missing
        (CALL + "}\n</tool_call>", ""),  # well formed
        (CALL + "\n</tool_call> Done.", "Done."),
        (CALL + "\nnot a marker", "not a marker"),  # no marker: the text stays content
    ],
)
def test_recovered_call_leaves_no_marker(text, content, chunked):
    message = parsed(text, chunked)
    assert [(c.name, c.arguments) for c in message.tool_calls] == [
        ("Bash", '{"command": "echo hi"}')
    ]
    assert (message.content or "").strip() == content
