"""Parsed output through the real server and the openai SDK, with the model's output chosen
by the test (a replay engine feeding the real tokenizer), streamed and not."""

from __future__ import annotations

import json
from contextlib import contextmanager

import openai
import pytest
from servers import replay_server
from shared import WEATHER_CHAT

from vllm_mlx.options import RuntimeOptions
from vllm_mlx.runtime import build_replay_runtime

ASK = [{"role": "user", "content": "Weather?"}]


@contextmanager
def replay_client(text: str, fail_after: int | None = None, **parsers):
    with replay_server(text, fail_after, **parsers) as (base, _):
        yield openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)


def both_ways(client, **kwargs):
    whole = client.chat.completions.create(model="replay", messages=ASK, **kwargs)
    chunks = list(
        client.chat.completions.create(model="replay", messages=ASK, stream=True, **kwargs)
    )
    return whole, chunks


def joined_calls(chunks) -> list[dict]:
    calls: dict[int, dict] = {}
    for chunk in chunks:
        for call in chunk.choices[0].delta.tool_calls or []:
            entry = calls.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
            entry["id"] = entry["id"] or call.id
            entry["name"] += call.function.name or ""
            entry["arguments"] += call.function.arguments or ""
    return [calls[i] for i in sorted(calls)]


def test_hermes_tool_calls_streamed_incrementally_and_whole():
    text = (
        'Let me check.<tool_call>\n{"name": "get_weather", "arguments": '
        '{"city": "Zürich \\"old town\\"", "days": 3}}\n</tool_call>'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    )
    with replay_client(text, tool_call_parser="hermes") as client:
        whole, chunks = both_ways(client, tools=[WEATHER_CHAT])
    message = whole.choices[0].message
    assert whole.choices[0].finish_reason == "tool_calls"
    assert message.content == "Let me check."
    assert [json.loads(c.function.arguments) for c in message.tool_calls] == [
        {"city": 'Zürich "old town"', "days": 3},
        {"city": "Oslo"},
    ]
    streamed = joined_calls(chunks)
    assert [c["arguments"] for c in streamed] == [c.function.arguments for c in message.tool_calls]
    assert all(c["name"] == "get_weather" and c["id"].startswith("call_") for c in streamed)
    # arguments arrive in pieces, not as one blob at the end
    pieces = [c for ch in chunks for c in (ch.choices[0].delta.tool_calls or [])]
    assert len(pieces) > 4
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    content = "".join(ch.choices[0].delta.content or "" for ch in chunks)
    assert content == "Let me check."


def test_reasoning_then_content_streamed_and_whole():
    text = "<think>The user wants weather.\nCheck units.</think>It is sunny."
    with replay_client(text, reasoning_parser="qwen3") as client:
        whole, chunks = both_ways(client)
    message = whole.choices[0].message
    reasoning = "".join(
        getattr(ch.choices[0].delta, "reasoning_content", None) or "" for ch in chunks
    )
    content = "".join(ch.choices[0].delta.content or "" for ch in chunks)
    assert message.reasoning_content == reasoning == "The user wants weather.\nCheck units."
    assert message.content == content == "It is sunny."


def test_tool_choice_none_leaves_markup_as_content():
    text = '<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>'
    with replay_client(text, tool_call_parser="hermes") as client:
        whole, chunks = both_ways(client, tools=[WEATHER_CHAT], tool_choice="none")
    assert whole.choices[0].message.tool_calls is None
    assert whole.choices[0].message.content == text
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == text


@pytest.mark.parametrize(
    "text",
    [
        'Sure <tool_call>\n{"na',  # cut before the call's name is known
        "Sure <tool_call>\nnot json at all\n</tool_call>",  # malformed
    ],
)
def test_unfinished_or_malformed_call_stays_in_content(text):
    with replay_client(text, tool_call_parser="hermes") as client:
        whole, chunks = both_ways(client, tools=[WEATHER_CHAT])
    assert whole.choices[0].message.tool_calls is None
    assert whole.choices[0].message.content == text
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == text


def test_unknown_parser_name_fails_start_up():
    with pytest.raises(ValueError, match="hermes"):
        build_replay_runtime("x", options=RuntimeOptions.of(tool_call_parser="no-such-parser"))


def test_streamed_text_never_splits_a_character():
    text = "Emoji 🎉🇫🇷, CJK 日本語, accents éàü, math ∑∫ — done."
    with replay_client(text) as client:
        whole, chunks = both_ways(client)
    pieces = [ch.choices[0].delta.content or "" for ch in chunks]
    assert "".join(pieces) == whole.choices[0].message.content == text
    assert not any("\ufffd" in p for p in pieces)
    assert len([p for p in pieces if p]) > 5  # it really streamed in pieces


def test_mid_stream_failure_sends_error_then_finish_then_done():
    with replay_client("The capital of France is Paris, a large city.", fail_after=4) as client:
        with client.chat.completions.with_streaming_response.create(
            model="replay", messages=ASK, stream=True
        ) as response:
            frames = [line for line in response.iter_lines() if line.startswith("data: ")]
        # the server stays up and serves the next request
        assert client.models.list().data
    payloads = [json.loads(f[6:]) for f in frames[:-1]]
    assert frames[-1] == "data: [DONE]"
    assert "injected fault" in payloads[-2]["error"]["message"]
    assert payloads[-1]["choices"][0]["finish_reason"] == "error"
    assert any(p.get("choices") and p["choices"][0]["delta"].get("content") for p in payloads)
