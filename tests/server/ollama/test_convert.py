"""Ollama bodies -> the protocol-neutral request, in-process (no model): options, format,
think, keep_alive durations, history with tool calls, results in Ollama's shape."""

from __future__ import annotations

import json
import math

import pytest

from vllm_mlx.families.message import MessageDelta, ToolCallDelta
from vllm_mlx.pipeline import ChatEvent, Usage
from vllm_mlx.server.errors import APIError, decode_body
from vllm_mlx.server.ollama.convert import chat_request, keep_alive_seconds
from vllm_mlx.server.ollama.protocol import ChatBody
from vllm_mlx.server.ollama.stream import Reply, Timer


def body(**fields) -> ChatBody:
    return decode_body(json.dumps({"model": "m", **fields}).encode(), ChatBody)


def test_options_become_sampling_a_cap_and_a_context_bound():
    chat = chat_request(
        body(
            messages=[{"role": "user", "content": "hi"}],
            options={
                "temperature": 0,
                "top_p": 0.9,
                "top_k": 40,
                "num_predict": 64,
                "num_ctx": 1024,
                "seed": 7,
                "stop": ["\n\n"],
                "repeat_penalty": 1.1,
                "num_gpu": 99,  # Ollama's, accepted, no effect here
            },
        )
    )
    s = chat.sampling
    assert (s.temperature, s.top_p, s.top_k, s.seed, s.stop) == (0, 0.9, 40, 7, ["\n\n"])
    assert s.repetition_penalty == 1.1
    assert (chat.max_tokens, chat.max_tokens_policy, chat.context_limit) == (64, "cap", 1024)


@pytest.mark.parametrize("num_predict", [-2, -1, 0])
def test_num_predict_without_a_positive_limit_leaves_the_room_of_the_context(num_predict):
    chat = chat_request(body(messages=[], options={"num_predict": num_predict}))
    assert chat.max_tokens is None


def test_a_negative_seed_is_a_random_one():
    assert chat_request(body(messages=[], options={"seed": -1})).sampling.seed is None


@pytest.mark.parametrize(
    "options",
    [
        {"temperature": "0.5"},
        {"num_predict": 10**12},
        {"num_predict": True},
        {"num_ctx": 0},
        {"stop": "x"},
        {"top_p": 0},
        {"seed": 2**70},
        {"num_gpu": "all"},
    ],
)
def test_bad_option_values_are_400s_naming_the_option(options):
    with pytest.raises(APIError) as caught:
        body(messages=[], options=options)
    assert caught.value.status == 400
    assert caught.value.message.startswith(f"options.{next(iter(options))}")


def test_format_json_schema_and_think_map_onto_constraint_and_thinking():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert chat_request(body(messages=[], format="json")).constraint.kind == "json_object"
    constraint = chat_request(body(messages=[], format=schema)).constraint
    assert (constraint.kind, constraint.spec, constraint.field) == ("json_schema", schema, "format")
    assert chat_request(body(messages=[], format="")).constraint is None
    with pytest.raises(APIError, match="format must be"):
        chat_request(body(messages=[], format="yaml"))
    assert chat_request(body(messages=[], think=False)).thinking.enabled is False
    assert chat_request(body(messages=[], think=True)).thinking.enabled is True
    assert chat_request(body(messages=[], think="max")).thinking.effort == "xhigh"
    assert chat_request(body(messages=[])).thinking.enabled is None


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, None),
        (0, 0.0),
        ("0", 0.0),
        (300, 300.0),
        ("300", 300.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1.5s", 1.5),
        ("250ms", 0.25),
        (-1, math.inf),
        ("-1m", math.inf),
    ],
)
def test_keep_alive_reads_seconds_and_go_durations(value, seconds):
    assert keep_alive_seconds(value) == seconds


@pytest.mark.parametrize("value", ["5 minutes", "m", "5x", "", "1h" * 40])
def test_a_bad_keep_alive_is_a_400(value):
    with pytest.raises(APIError, match="keep_alive"):
        keep_alive_seconds(value)


def test_history_tool_calls_become_json_text_and_results_answer_their_call():
    chat = chat_request(
        body(
            messages=[
                {"role": "user", "content": "Weather?"},
                {
                    "role": "assistant",
                    "content": "",
                    "thinking": "I should look it up.",
                    "tool_calls": [
                        {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
                    ],
                },
                {"role": "tool", "content": "18C", "tool_name": "get_weather"},
            ],
            tools=[{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
        )
    )
    assistant, tool = chat.messages[1], chat.messages[2]
    call = assistant["tool_calls"][0]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert assistant["reasoning_content"] == "I should look it up."
    assert tool == {
        "role": "tool",
        "content": "18C",
        "tool_call_id": call["id"],
        "name": "get_weather",
    }
    assert chat.tools[0]["function"]["name"] == "get_weather"


def test_images_are_recorded_with_their_data_for_the_pipeline():
    message = {"role": "user", "content": "What is it?", "images": ["aGk="]}
    chat = chat_request(body(messages=[message]))
    assert chat.messages[0]["content"].startswith("What is it?")
    (image,) = chat.omitted_media
    assert (image.kind, image.param, image.source.data) == ("image", "messages.0.images.0", "aGk=")


def test_streamed_pieces_fold_into_the_whole_reply_with_calls_sent_whole():
    reply = Reply("m", "chat", Timer())
    first = ChatEvent(
        MessageDelta("hm", "", [ToolCallDelta(0, "call_a", "f", '{"x": ')]), usage=Usage(3)
    )
    second = ChatEvent(MessageDelta("", "", [ToolCallDelta(0, None, None, "1}")]))
    third = ChatEvent(MessageDelta("", "", [ToolCallDelta(1, "call_b", "g", "{}")]))
    last = ChatEvent(MessageDelta(), finish_reason="tool_calls", usage=Usage(3, 9))
    lines = [reply._on_event(e) for e in (first, second, third, last)] + [reply._on_finish(last)]
    assert [len(group) for group in lines] == [1, 0, 1, 1, 1]
    sent_calls = [p["message"].get("tool_calls") for p in reply.sent]
    assert sent_calls[1] == [
        {"id": "call_a", "function": {"index": 0, "name": "f", "arguments": {"x": 1}}}
    ]
    assert sent_calls[2] == [
        {"id": "call_b", "function": {"index": 1, "name": "g", "arguments": {}}}
    ]
    whole = reply.collected()
    assert whole["message"]["thinking"] == "hm"
    assert [c["function"]["name"] for c in whole["message"]["tool_calls"]] == ["f", "g"]
    assert whole["done"] is True and whole["done_reason"] == "stop"
    assert (whole["prompt_eval_count"], whole["eval_count"]) == (3, 9)
