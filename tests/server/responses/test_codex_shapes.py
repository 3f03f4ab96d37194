"""Codex's other Responses shapes, through the openai SDK on replay servers: free-form
``custom`` tools (described as a one-argument function, parsed back into custom_tool_call
items with their ``input``), ``namespace`` tools inside an ``additional_tools`` input item,
custom calls and outputs in history, and reasoning items round-tripped through
``encrypted_content`` (base64 of the text here, documented as not encrypted)."""

from __future__ import annotations

import base64
import json

import openai
import pytest
from servers import replay_server

from vllm_mlx.server.responses.convert import input_messages

PATCH = "*** Begin Patch\n*** End Patch"
CALL = (
    "<think>Patch it.</think><tool_call>\n"
    + json.dumps({"name": "apply_patch", "arguments": {"input": PATCH}})
    + "\n</tool_call>"
)
TOOLS = [
    {"type": "custom", "name": "apply_patch", "description": "Apply a patch.", "format": {}},
    {
        "type": "namespace",
        "name": "shell",
        "tools": [
            {
                "type": "function",
                "name": "exec_command",
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
            }
        ],
    },
]
INPUT = [
    {"type": "additional_tools", "tools": TOOLS},
    {"role": "user", "content": [{"type": "input_text", "text": "Fix it."}]},
]


@pytest.fixture(scope="module")
def client():
    with replay_server(CALL, tool_call_parser="hermes", reasoning_parser="deepseek_r1") as (
        base,
        _,
    ):
        yield openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0)


def kwargs(**more):
    return dict(model="gpt-5-codex", input=INPUT, store=False, **more)


@pytest.mark.parametrize("stream", [False, True])
def test_custom_tool_call_comes_back_with_its_input(client, stream):
    include = ["reasoning.encrypted_content"]
    if stream:
        with client.responses.stream(**kwargs(include=include)) as events:
            kinds = [e.type for e in events]
            final = events.get_final_response()
        assert "response.custom_tool_call_input.done" in kinds
        assert "response.function_call_arguments.delta" not in kinds
    else:
        final = client.responses.create(**kwargs(include=include))
    reasoning, call = final.output
    assert call.type == "custom_tool_call" and call.name == "apply_patch"
    assert call.input == PATCH and call.call_id
    assert base64.b64decode(reasoning.encrypted_content).decode() == "Patch it."


def test_without_include_no_encrypted_content(client):
    reasoning = client.responses.create(**kwargs()).output[0]
    assert reasoning.type == "reasoning" and reasoning.encrypted_content is None


def test_history_with_custom_calls_and_encrypted_reasoning(client):
    history = [
        *INPUT,
        {
            "type": "reasoning",
            "summary": [],
            "encrypted_content": base64.b64encode(b"Patch it.").decode(),
        },
        {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": PATCH},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done!"},
    ]
    reply = client.responses.create(model="gpt-5-codex", input=history, store=False)
    assert reply.status == "completed"
    user, assistant, tool = input_messages(history)
    assert assistant["reasoning_content"] == "Patch it."
    call = assistant["tool_calls"][0]["function"]
    assert json.loads(call["arguments"]) == {"input": PATCH}
    assert tool == {"role": "tool", "tool_call_id": "c1", "content": "Done!"}


def test_foreign_encrypted_content_is_ignored():
    (message,) = input_messages([{"type": "reasoning", "encrypted_content": "gAAAA%%not-ours"}])
    assert "reasoning_content" not in message
