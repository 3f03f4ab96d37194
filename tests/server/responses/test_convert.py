"""The Responses converter in-process (shape only), and its error mapping through the real
app in-process with starlette's TestClient (replay engine: no model, no sockets)."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from vllm_mlx.constrained import Constraint
from vllm_mlx.request import Sampling, Thinking
from vllm_mlx.runtime import build_replay_runtime
from vllm_mlx.server.app import create_app
from vllm_mlx.server.errors import APIError
from vllm_mlx.server.responses.convert import to_chat_request
from vllm_mlx.server.responses.protocol import ResponsesRequest
from vllm_mlx.server.state import ServerState


def convert(history=None, **fields):
    body = ResponsesRequest.model_validate({"model": "m", "input": "hi", **fields})
    return to_chat_request(body, history or [])


def test_intent_fields_are_carried():
    chat, conversation = convert(
        instructions="Be brief.",
        max_output_tokens=12,
        temperature=0,
        reasoning={"effort": "minimal"},
        text={"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
    )
    assert (chat.max_tokens, chat.max_tokens_policy) == (12, "exact")
    assert chat.sampling == Sampling(temperature=0)
    assert chat.thinking == Thinking(effort="minimal") and chat.template_kwargs == {}
    assert chat.constraint == Constraint("json_schema", {"type": "object"}, "text.format")
    assert chat.messages[0] == {"role": "system", "content": "Be brief."}
    assert conversation == [{"role": "user", "content": "hi"}]  # instructions do not carry


def test_items_merge_into_one_assistant_turn():
    chat, _ = convert(
        history=[{"role": "user", "content": "earlier"}],
        input=[
            {
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "t"}],
            },
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "a"}],
            },
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "42"},
        ],
    )
    earlier, assistant, tool = chat.messages
    assert earlier["content"] == "earlier"
    assert assistant["reasoning_content"] == "t" and assistant["content"] == "a"
    assert assistant["tool_calls"][0]["id"] == "c1"
    assert tool == {"role": "tool", "tool_call_id": "c1", "content": "42"}


@pytest.mark.parametrize(
    "fields,param",
    [
        ({"tool_choice": "sometimes"}, "tool_choice"),
        ({"tools": [{"type": "function"}]}, "tools.0.name"),
        ({"text": {"format": {"type": "yaml"}}}, "text.format.type"),
        ({"input": [{"type": "wizard"}]}, "input.0.type"),
    ],
)
def test_shape_errors_name_the_field(fields, param):
    with pytest.raises(APIError) as caught:
        convert(**fields)
    assert caught.value.param == param


@pytest.fixture(scope="module")
def app_client():
    runtime = build_replay_runtime("Hello.")
    app = create_app(ServerState(runtime.pipeline, "replay"))
    with TestClient(app, base_url="http://localhost") as client:
        yield client
    runtime.close()


@pytest.mark.parametrize(
    "fields,param",
    [
        ({"reasoning": {"effort": "extreme"}}, "reasoning.effort"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"max_output_tokens": 10**7}, "max_output_tokens"),
        ({"text": {"format": {"type": "json_schema", "schema": {"type": 3}}}}, "text.format"),
    ],
)
def test_pipeline_errors_use_the_responses_field_names(app_client, fields, param):
    reply = app_client.post("/v1/responses", json={"model": "m", "input": "hi", **fields})
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param
