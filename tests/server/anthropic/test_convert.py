"""The Anthropic Messages converter in-process: shape only, no model, no sockets."""

from __future__ import annotations

import pytest

from vllm_mlx.families.message import ParsedMessage, ToolCall
from vllm_mlx.pipeline import Usage
from vllm_mlx.request import Sampling, Thinking, omitted_text, replace_markers
from vllm_mlx.server.anthropic.convert import (
    content_blocks,
    stop_reason,
    to_chat_request,
    usage_body,
)
from vllm_mlx.server.anthropic.protocol import MessagesRequest, PromptFields
from vllm_mlx.server.errors import APIError

HI = [{"role": "user", "content": "hi"}]


def convert(**fields):
    return to_chat_request(
        MessagesRequest.model_validate(
            {"model": "m", "max_tokens": 32000, "messages": HI, **fields}
        )
    )


def test_max_tokens_is_a_cap_and_sampling_is_carried():
    chat = convert(temperature=0.2, top_k=5, stop_sequences=["END"])
    assert (chat.max_tokens, chat.max_tokens_policy) == (32000, "cap")
    assert chat.sampling == Sampling(temperature=0.2, top_k=5, stop=["END"])


@pytest.mark.parametrize(
    "thinking,expected",
    [
        (None, Thinking()),
        ({"type": "disabled"}, Thinking(enabled=False)),
        ({"type": "enabled", "budget_tokens": 99}, Thinking(enabled=True, budget=99)),
        ({"type": "adaptive"}, Thinking()),
    ],
)
def test_thinking_is_intent_not_a_template_key(thinking, expected):
    chat = convert(**({"thinking": thinking} if thinking else {}))
    assert chat.thinking == expected and chat.template_kwargs == {}


def test_count_tokens_body_has_no_generation_fields():
    chat = to_chat_request(PromptFields.model_validate({"messages": HI}))
    assert chat.max_tokens is None and chat.sampling == Sampling()


def test_blocks_become_chat_messages():
    chat = convert(
        system=[
            {"type": "text", "text": "x-anthropic-billing-header: cc=1"},
            {"type": "text", "text": "Be brief."},
        ],
        messages=[
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm"},
                    {"type": "tool_use", "id": "toolu_1", "name": "w", "input": {"c": "P"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                    {"type": "text", "text": "Thanks"},
                ],
            },
        ],
    )
    assert [m["role"] for m in chat.messages] == ["system", "user", "assistant", "tool", "user"]
    assert chat.messages[0]["content"] == "Be brief."
    assert chat.messages[2]["reasoning_content"] == "hmm"
    assert chat.messages[2]["tool_calls"][0]["function"]["arguments"] == '{"c": "P"}'
    assert chat.messages[3] == {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"}


def test_tool_choice_shapes():
    tools = [{"name": "w", "input_schema": {"type": "object"}}]
    assert convert(tools=tools, tool_choice={"type": "any"}).tool_choice == "required"
    named = convert(tools=tools, tool_choice={"type": "tool", "name": "w"})
    assert named.tool_choice == {"type": "function", "function": {"name": "w"}}
    single = convert(tools=tools, tool_choice={"type": "auto", "disable_parallel_tool_use": True})
    assert single.parallel_tool_calls is False
    with pytest.raises(APIError) as caught:
        convert(tools=tools, tool_choice={"type": "tool"})
    assert caught.value.param == "tool_choice.name"


def test_images_become_placeholders_recorded_by_place():
    chat = convert(
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "See "}, {"type": "image"}]}
        ]
    )
    # a marker the pipeline writes out (the placeholder, on a text-only model)
    shown = replace_markers(chat.messages, lambda i: omitted_text(chat.omitted_media[i].kind))
    assert shown[-1]["content"] == "See [image omitted: this model reads text only]"
    assert [(m.kind, m.param) for m in chat.omitted_media] == [("image", "messages.0.content.1")]


def test_results_become_blocks():
    message = ParsedMessage("why", "hi", [ToolCall("call_ab", "w", '{"c": 1}')])
    assert content_blocks(message) == [
        {"type": "thinking", "thinking": "why", "signature": ""},
        {"type": "text", "text": "hi"},
        {"type": "tool_use", "id": "toolu_ab", "name": "w", "input": {"c": 1}},
    ]
    assert stop_reason("length", None) == ("max_tokens", None)
    assert stop_reason("stop", "END") == ("stop_sequence", "END")
    assert usage_body(Usage(10, 2, cached_tokens=4))["input_tokens"] == 6


def test_a_mid_conversation_system_turn_is_kept_in_place():
    chat = convert(
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "system", "content": [{"type": "text", "text": "Tools changed."}]},
            {"role": "user", "content": "go"},
        ]
    )
    assert [m["role"] for m in chat.messages] == ["user", "system", "user"]
    assert chat.messages[1]["content"] == "Tools changed."
