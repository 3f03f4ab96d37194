"""The chat-completions converter in-process: shape only, no model, no sockets."""

from __future__ import annotations

import pytest

from vllm_mlx.families.message import MessageDelta, ParsedMessage, ToolCall, ToolCallDelta
from vllm_mlx.pipeline import ChatResult, Usage
from vllm_mlx.request import Sampling, Thinking
from vllm_mlx.server.errors import APIError
from vllm_mlx.server.openai.convert import completion_body, delta_body, to_chat_request
from vllm_mlx.server.openai.protocol import ChatCompletionRequest


def convert(**fields):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
    return to_chat_request(ChatCompletionRequest.model_validate(body))


def test_intent_fields_are_carried_not_decided():
    chat = convert(
        max_tokens=9,
        temperature=0.5,
        top_k=-1,
        stop="END",
        reasoning_effort="minimal",
        thinking_token_budget=40,
        chat_template_kwargs={"thinking": False},
        logit_bias={"7": 3},
    )
    assert (chat.max_tokens, chat.max_tokens_policy) == (9, "exact")
    assert chat.thinking == Thinking(effort="minimal", budget=40)
    assert chat.template_kwargs == {"thinking": False}
    assert chat.sampling == Sampling(temperature=0.5, top_k=-1, stop=["END"], logit_bias={7: 3})


def test_max_completion_tokens_wins_and_absent_is_none():
    assert convert(max_tokens=5, max_completion_tokens=7).max_tokens == 7
    assert convert().max_tokens is None


def test_messages_become_template_messages():
    chat = convert(
        messages=[
            {
                "role": "developer",
                "content": [{"type": "text", "text": "be "}, {"type": "text", "text": "brief"}],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "function": {"name": "f", "arguments": {"x": 1}}},
                ],
            },
            {"role": "tool", "content": "ok"},
        ]
    )
    system, assistant, tool = chat.messages
    assert system == {"role": "system", "content": "be brief"}
    assert assistant["tool_calls"][0]["function"]["arguments"] == '{"x": 1}'
    assert tool["tool_call_id"] == ""


@pytest.mark.parametrize(
    "fields,param",
    [
        ({"top_logprobs": 2}, "top_logprobs"),
        (
            {"messages": [{"role": "user", "content": [{"type": "audio"}]}]},
            "messages.0.content.0.type",
        ),
    ],
)
def test_shape_errors_name_the_field(fields, param):
    with pytest.raises(APIError) as caught:
        convert(**fields)
    assert caught.value.status == 400 and caught.value.param == param


def test_tool_choice_is_left_to_the_pipeline():
    """Validation happens once, in the pipeline (tests/test_request.py)."""
    assert convert(tool_choice="required").tool_choice == "required"


def test_results_become_openai_shapes():
    delta = MessageDelta("r", "c", [ToolCallDelta(0, "call_1", "f", "{}")])
    assert delta_body(delta) == {
        "reasoning_content": "r",
        "content": "c",
        "tool_calls": [
            {
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": "f", "arguments": "{}"},
            }
        ],
    }
    result = ChatResult(
        ParsedMessage(content="hi", tool_calls=[ToolCall("call_1", "f", "{}")]),
        "tool_calls",
        None,
        Usage(3, 2),
        [],
        constraint_gave_up="dead end",
    )
    body = completion_body(result, "id", 0, "m", logprobs=False)
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "f"
    assert body["usage"]["total_tokens"] == 5
    assert body["constraint_gave_up"] == "dead end"
