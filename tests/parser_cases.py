"""Shared helpers for the parser tests: streaming in chunks and comparing messages."""

from __future__ import annotations

import json

from vllm_mlx.chat.parse_cli import join_deltas
from vllm_mlx.chat.stream import OutputStream, make_output_stream, parse_output
from vllm_mlx.families.message import ParsedMessage
from vllm_mlx.reasoning import ReasoningParserManager
from vllm_mlx.tool_parsers import ToolParserManager

WEATHER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "scale": {"type": "number"},
                    "metric": {"type": "boolean"},
                    "opts": {"type": "object"},
                    "tags": {"type": "array"},
                    "zip": {"type": "string"},
                },
            },
        },
    },
    {"type": "function", "function": {"name": "noop", "parameters": {"type": "object"}}},
]


def shape(message: ParsedMessage) -> tuple:
    """A message without its random call ids."""
    calls = [(c.name, c.arguments) for c in message.tool_calls]
    return message.reasoning_content, message.content, calls


def calls_of(message: ParsedMessage) -> list[tuple[str, object]]:
    return [(c.name, json.loads(c.arguments)) for c in message.tool_calls]


def formats(tool: str | None, reasoning: str | None) -> dict:
    """The formats that parser names stand for (resolved as the runtime resolves them)."""
    return {
        "tool_format": ToolParserManager.format(tool) if tool else None,
        "reasoning_format": ReasoningParserManager.format(reasoning) if reasoning else None,
    }


def parse(text: str, tool: str | None = None, reasoning: str | None = None, **kw):
    return parse_output(text, **formats(tool, reasoning), **kw)


def open_stream(tool: str | None = None, reasoning: str | None = None, **kw) -> OutputStream:
    return make_output_stream(**formats(tool, reasoning), **kw)


def stream(text: str, sizes: list[int], tool=None, reasoning=None, **kw):
    """Feed ``text`` in pieces of the given sizes (cycled); return (joined, final, deltas)."""
    s = open_stream(tool, reasoning, **kw)
    deltas, i, k = [], 0, 0
    while i < len(text):
        size = sizes[k % len(sizes)]
        deltas.append(s.feed(text[i : i + size]))
        i, k = i + size, k + 1
    deltas.append(s.finish())
    return join_deltas(deltas), s.message, deltas


def assert_same_in_every_mode(text: str, tool=None, reasoning=None, **kw) -> ParsedMessage:
    """Non-streaming equals streaming for several chunkings; returns the message."""
    whole = parse(text, tool, reasoning, **kw)
    for sizes in ([1], [2], [3, 1, 4], [7], [len(text) or 1]):
        joined, final, _ = stream(text, sizes, tool, reasoning, **kw)
        assert shape(joined) == shape(whole), sizes
        assert shape(final) == shape(whole), sizes
    return whole
