"""/v1/messages and /v1/messages/count_tokens through real HTTP with the official anthropic SDK:
the real default model for answers, truncation, stop sequences and errors; the replay runtime
for controlled tool-call and reasoning output and for a fault injected mid-stream; a tiny
think-token model for thinking budgets."""

from __future__ import annotations

import json
from contextlib import contextmanager

import anthropic
import httpx
import pytest
from comparing import comparable_message
from servers import FailingSource, echo_server, replay_server, tiny_model_server
from shared import FRANCE, GREEDY, WEATHER_ANTHROPIC

TOOL_REPLY = (
    "Let me check.<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>'
)


@pytest.fixture(scope="module")
def anthropic_client(real_server):
    return anthropic.Anthropic(base_url=real_server, api_key="unused", max_retries=0, timeout=300)


def create_and_stream(client, **kwargs):
    whole = client.messages.create(**kwargs)
    with client.messages.stream(**kwargs) as stream:
        events = list(stream)
        final = stream.get_final_message()
    return whole, events, final


@contextmanager
def replay_client(text: str, **parsers):
    with replay_server(text, **parsers) as (base, runtime):
        yield anthropic.Anthropic(base_url=base, api_key="k", max_retries=0), runtime


# -- the real default model --------------------------------------------------------------

slow = pytest.mark.slow  # the real default model


@slow
def test_create_answers_with_served_name_and_usage(anthropic_client):
    reply = anthropic_client.messages.create(
        model="claude-sonnet-4-5", max_tokens=12, extra_body=GREEDY, messages=FRANCE
    )
    assert reply.model == "smollm2" and reply.role == "assistant"
    assert [b.type for b in reply.content] == ["text"]
    assert "Paris" in reply.content[0].text
    assert reply.stop_reason == "end_turn" and reply.stop_sequence is None
    counted = anthropic_client.messages.count_tokens(model="claude-sonnet-4-5", messages=FRANCE)
    # Anthropic counts prompt tokens read from the prefix cache apart from input_tokens
    prompt = reply.usage.input_tokens + (reply.usage.cache_read_input_tokens or 0)
    assert prompt == counted.input_tokens > 5
    assert reply.usage.output_tokens > 0


@slow
def test_stream_accumulates_to_the_non_streamed_message(anthropic_client):
    whole, events, final = create_and_stream(
        anthropic_client, model="m", max_tokens=12, extra_body=GREEDY, messages=FRANCE
    )
    assert comparable_message(final) == comparable_message(whole)
    types = [e.type for e in events]
    assert types[0] == "message_start" and types[-1] == "message_stop"
    assert types[-2] == "message_delta"
    assert types.count("content_block_start") == types.count("content_block_stop") == 1


@slow
def test_max_tokens_truncation_in_both_modes(anthropic_client):
    whole, events, final = create_and_stream(
        anthropic_client, model="m", max_tokens=3, extra_body=GREEDY, messages=FRANCE
    )
    for message in (whole, final):
        assert message.stop_reason == "max_tokens"
        assert message.usage.output_tokens == 3
    delta = next(e for e in events if e.type == "message_delta")
    assert delta.delta.stop_reason == "max_tokens"


@slow
def test_stop_sequence_in_both_modes(anthropic_client):
    whole, _, final = create_and_stream(
        anthropic_client,
        model="m",
        max_tokens=12,
        extra_body=GREEDY,
        messages=FRANCE,
        stop_sequences=["is Pa"],
    )
    for message in (whole, final):
        assert message.stop_reason == "stop_sequence"
        assert message.stop_sequence == "is Pa"
        assert message.content[0].text.endswith("France ")
    assert comparable_message(final) == comparable_message(whole)


BAD_REQUESTS = [
    ("bad role", {"messages": [{"role": "wizard", "content": "hi"}]}),
    ("no messages", {"messages": []}),
    ("max_tokens missing", {"max_tokens": None}),
    (
        "tool_choice names an unknown tool",
        {"tools": [WEATHER_ANTHROPIC], "tool_choice": {"type": "tool", "name": "nope"}},
    ),
    ("temperature out of range", {"temperature": 1.5}),
]


@slow
@pytest.mark.parametrize("name,change", BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
def test_bad_requests_get_anthropic_error_shape(real_server, name, change):
    body = {"model": "m", "max_tokens": 5, "messages": FRANCE, **change}
    body = {k: v for k, v in body.items() if v is not None}
    reply = httpx.post(f"{real_server}/v1/messages", json=body, timeout=60)
    assert reply.status_code == 400
    payload = reply.json()
    assert payload["type"] == "error"
    assert payload["error"]["type"] == "invalid_request_error" and payload["error"]["message"]


@slow
def test_sdk_raises_bad_request(anthropic_client):
    with pytest.raises(anthropic.BadRequestError):
        anthropic_client.messages.create(
            model="m", max_tokens=5, messages=[{"role": "tool", "content": "x"}]
        )


@slow
def test_forced_tool_use_on_the_real_model(anthropic_client):
    kwargs = dict(
        model="m",
        max_tokens=60,
        extra_body=GREEDY,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER_ANTHROPIC],
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    whole, _, final = create_and_stream(anthropic_client, **kwargs)
    assert whole.stop_reason == "tool_use"
    call = whole.content[-1]
    assert call.type == "tool_use" and call.name == "get_weather" and call.id.startswith("toolu_")
    assert isinstance(call.input.get("city"), str)
    assert comparable_message(final) == comparable_message(whole)


# -- controlled output (replay) ----------------------------------------------------------


def test_tool_use_streams_input_incrementally_and_matches_non_stream():
    with replay_client(TOOL_REPLY, tool_call_parser="hermes") as (client, _):
        kwargs = dict(
            model="claude-sonnet-4-5", max_tokens=200, messages=FRANCE, tools=[WEATHER_ANTHROPIC]
        )
        whole, events, final = create_and_stream(client, **kwargs)
    assert [b.type for b in whole.content] == ["text", "tool_use"]
    call = whole.content[1]
    assert call.id.startswith("toolu_") and call.name == "get_weather"
    assert call.input == {"city": "Paris", "days": 3}
    assert whole.stop_reason == "tool_use"
    assert comparable_message(final) == comparable_message(whole)
    pieces = [
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert len(pieces) > 3, "tool input must stream as it is parsed, not as one blob"
    assert json.loads("".join(pieces)) == call.input
    # each block is opened before its deltas and closed before the next opens
    starts = [e.index for e in events if e.type == "content_block_start"]
    stops = [e.index for e in events if e.type == "content_block_stop"]
    assert starts == stops == [0, 1]


def test_claude_code_request_shape_is_accepted():
    """Query string, beta headers, billing-header system block, cache_control, metadata,
    context_management, max_tokens past the context, and a thinking budget for a model that
    cannot think."""
    system = [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1; cch=123;"},
        {"type": "text", "text": "Answer briefly.", "cache_control": {"type": "ephemeral"}},
    ]
    body = {
        "model": "claude-opus-4-1",
        "max_tokens": 32000,
        "system": system,
        "messages": FRANCE,
        "metadata": {"user_id": "u"},
        "context_management": {"edits": []},
        "thinking": {"type": "enabled", "budget_tokens": 31999},
        "stop_sequences": ["."],
    }
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01", "anthropic-beta": "x"}
    with replay_client("Paris. It is large.") as (client, _):
        base = str(client.base_url).rstrip("/")
        reply = httpx.post(f"{base}/v1/messages?beta=true", json=body, headers=headers, timeout=60)
        counted = httpx.post(
            f"{base}/v1/messages/count_tokens?beta=true", json=body, headers=headers, timeout=60
        )
        plain = client.messages.count_tokens(model="m", system="Answer briefly.", messages=FRANCE)
    assert reply.status_code == 200, reply.text
    assert reply.json()["model"] == "replay"
    assert reply.json()["stop_reason"] == "stop_sequence"
    assert reply.json()["content"] == [{"type": "text", "text": "Paris"}]
    # the billing header stays out of the prompt
    assert counted.json() == {"input_tokens": plain.input_tokens}


def test_thinking_blocks_stream_and_replay():
    reply_text = "<think>Paris is in France.</think>The capital is Paris."
    with replay_client(reply_text, reasoning_parser="qwen3") as (client, runtime):
        whole, events, final = create_and_stream(
            client,
            model="m",
            max_tokens=100,
            messages=FRANCE,
            thinking={"type": "enabled", "budget_tokens": 1024},
        )
        assert [b.type for b in whole.content] == ["thinking", "text"]
        assert whole.content[0].thinking == "Paris is in France."
        assert whole.content[1].text == "The capital is Paris."
        assert comparable_message(final) == comparable_message(whole)
        assert any(
            e.type == "content_block_delta" and e.delta.type == "thinking_delta" for e in events
        )
        # a thinking block sent back is replayed into the prompt (as reasoning_content)
        follow_up = FRANCE + [
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in whole.content],
            },
            {"role": "user", "content": "Sure?"},
        ]
        counted = client.messages.count_tokens(model="m", messages=follow_up)
        without = client.messages.count_tokens(
            model="m",
            messages=FRANCE
            + [
                {"role": "assistant", "content": "The capital is Paris."},
                {"role": "user", "content": "Sure?"},
            ],
        )
    assert counted.input_tokens >= without.input_tokens


def test_tool_result_round_trip_renders_into_the_prompt():
    """An echo server answers with the rendered prompt itself: the tools, the history's
    tool call (parsed back out of the echo as a tool_use) and the tool result are in it, and
    count_tokens counts exactly that prompt."""
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "sunny, 21C"}],
                },
                {"type": "text", "text": "Summarise."},
            ],
        },
    ]
    with echo_server(tool_call_parser="hermes") as (base, _):
        client = anthropic.Anthropic(base_url=base, api_key="k", max_retries=0)
        reply = client.messages.create(
            model="m", max_tokens=2000, messages=messages, tools=[WEATHER_ANTHROPIC]
        )
        counted = client.messages.count_tokens(
            model="m", messages=messages, tools=[WEATHER_ANTHROPIC]
        )
    prompt = "".join(b.text for b in reply.content if b.type == "text")
    assert '"name": "get_weather"' in prompt  # the tool, in the Hermes system prompt
    assert "<tool_response>\nsunny, 21C\n</tool_response>" in prompt
    assert prompt.index("sunny, 21C") < prompt.index("Summarise.")
    calls = [(b.name, b.input) for b in reply.content if b.type == "tool_use"]
    assert calls == [("get_weather", {"city": "Paris"})]  # the history's call, rendered
    assert reply.usage.input_tokens + (reply.usage.cache_read_input_tokens or 0) == (
        counted.input_tokens
    )


def test_mid_stream_failure_ends_with_an_error_event():
    with replay_client("The capital of France is Paris, a large city.") as (client, runtime):
        runtime.engine.source = FailingSource(runtime.engine.source, after=4)
        seen = []
        with pytest.raises(anthropic.APIStatusError) as failure:
            with client.messages.stream(model="m", max_tokens=50, messages=FRANCE) as stream:
                for event in stream:
                    seen.append(event.type)
        assert "injected fault" in str(failure.value)
        assert "content_block_delta" in seen and "message_stop" not in seen
        with httpx.stream(
            "POST",
            f"{client.base_url}/v1/messages",
            json={"model": "m", "max_tokens": 50, "messages": FRANCE, "stream": True},
        ) as raw:
            lines = [line for line in raw.iter_lines() if line.startswith("event: ")]
        assert lines[-1] == "event: error"
        # a non-streaming request fails with a JSON error in Anthropic's shape
        with pytest.raises(anthropic.InternalServerError) as failure:
            client.messages.create(model="m", max_tokens=50, messages=FRANCE)
        assert failure.value.body["type"] == "error"


# -- thinking budget on a tiny model with think tokens -----------------------------------


@pytest.fixture(scope="module")
def tiny_thinking_client():
    with tiny_model_server() as (base, tokenizer):
        yield anthropic.Anthropic(base_url=base, api_key="k", max_retries=0), tokenizer


def test_thinking_budget_bounds_the_thinking_block(tiny_thinking_client):
    client, tokenizer = tiny_thinking_client
    hello = [{"role": "user", "content": "Hello"}]
    unbounded = client.messages.create(model="m", max_tokens=60, extra_body=GREEDY, messages=hello)
    thought = unbounded.content[0]
    assert thought.type == "thinking"
    assert len(tokenizer.encode(thought.thinking, add_special_tokens=False)) > 13
    for budget in (4, 12):
        reply = client.messages.create(
            model="m",
            max_tokens=60,
            extra_body=GREEDY,
            messages=[{"role": "user", "content": "Hello"}],
            thinking={"type": "enabled", "budget_tokens": budget},
        )
        thinking = [b for b in reply.content if b.type == "thinking"]
        assert thinking, reply.content
        used = len(tokenizer.encode(thinking[0].thinking, add_special_tokens=False))
        assert used <= budget + 1  # the close marker may merge with the last reasoning token
        assert reply.usage.output_tokens > used  # generation went on past the thinking


@slow
def test_repeated_prompt_reports_cache_read_input_tokens(anthropic_client):
    messages = [{"role": "user", "content": "Name two animals that live in the sea."}]
    first = anthropic_client.messages.create(
        model="m", max_tokens=6, messages=messages, extra_body=GREEDY
    )
    again = anthropic_client.messages.create(
        model="m", max_tokens=6, messages=messages, extra_body=GREEDY
    )
    assert again.content[0].text == first.content[0].text
    prompt = first.usage.input_tokens + (first.usage.cache_read_input_tokens or 0)
    assert again.usage.cache_read_input_tokens == prompt - 1
    assert again.usage.input_tokens == 1
