"""MCP tools on /v1/responses through real HTTP with the official openai SDK: `vllm-mlx serve
--mcp-config` with the toolbox MCP server over stdio, on the real default model (the forced
first turn calls the real tool) and on a replayed output that always calls the tool (so only
max_tool_calls ends the loop)."""

from __future__ import annotations

import json
from contextlib import contextmanager

import httpx
import openai
import pytest
from comparing import comparable_response
from servers import mcp_cli_server, thread_server
from shared import ECHO_CALL

from vllm_mlx.runtime import build_replay_runtime
from vllm_mlx.server.app import create_app
from vllm_mlx.server.state import ServerState

ECHO = {"type": "mcp", "server_label": "toolbox", "allowed_tools": ["echo"]}
NEVER = {**ECHO, "require_approval": "never"}


@contextmanager
def mcp_serve(tmp, *args: str, max_tool_calls: int = 3):
    """`vllm-mlx serve ARGS --mcp-config` with the toolbox server; yields an SDK client."""
    with mcp_cli_server(tmp, *args, max_tool_calls=max_tool_calls) as base:
        yield openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=600)


@pytest.fixture(scope="module")
def replay_client(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("responses_mcp_replay")
    replay = tmp / "replay.txt"
    replay.write_text(ECHO_CALL)
    with mcp_serve(tmp, "--replay", str(replay)) as client:
        yield client


@pytest.fixture(scope="module")
def mixed_client(tmp_path_factory):
    """A model turn with a good MCP call, a bad one, and a call to the client's own tool."""
    tmp = tmp_path_factory.mktemp("responses_mcp_mixed")
    replay = tmp / "replay.txt"
    replay.write_text(
        ECHO_CALL
        + '\n<tool_call>\n{"name": "echo", "arguments": {"text": 5}}\n</tool_call>'
        + '\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    )
    with mcp_serve(tmp, "--replay", str(replay)) as client:
        yield client


def kinds(output) -> list[str]:
    return [item.type for item in output]


# -- the real default model ------------------------------------------------------------------


@pytest.mark.slow
def test_forced_call_runs_the_real_tool_and_answers(tmp_path):
    kwargs = dict(
        model="gpt-5-codex",
        input="Say ping with the echo tool",
        tools=[NEVER],
        tool_choice="required",  # the first turn only; later turns are "auto"
        max_output_tokens=60,
        temperature=0,
    )
    with mcp_serve(tmp_path) as client:
        response = client.responses.create(**kwargs)
        with client.responses.stream(**kwargs) as stream:
            events = list(stream)
    listed = response.output[0]
    assert listed.type == "mcp_list_tools" and listed.server_label == "toolbox"
    assert [t.name for t in listed.tools] == ["echo"]  # allowed_tools narrows the listing
    assert listed.tools[0].input_schema["properties"]["text"]["type"] == "string"
    # each turn's items in the order written: text the forced turn wrote before its call
    # (the tiny model's) comes first, then the call it made
    calls = [item for item in response.output if item.type == "mcp_call"]
    assert calls, kinds(response.output)
    call = calls[0]
    assert kinds(response.output[1 : response.output.index(call)]) in ([], ["message"])
    assert call.server_label == "toolbox" and call.name == "echo" and call.error is None
    # the echo tool returns its text unchanged: the output came from the real tool
    assert call.output == json.loads(call.arguments)["text"]
    assert response.status == "completed"  # the model answered after the tool's result
    assert response.output[-1].type == "message" and response.output_text
    assert "function_call" not in kinds(response.output)
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    types = [e.type for e in events]
    assert types[-1] == "response.completed" and types.count("response.completed") == 1
    assert "response.mcp_call.completed" in types
    assert comparable_response(events[-1].response) == comparable_response(response)


# -- a replayed model output that always calls the tool ---------------------------------------


def test_max_tool_calls_stops_an_endless_loop(replay_client):
    response = replay_client.responses.create(
        model="m", input="ping forever", tools=[NEVER], max_tool_calls=2
    )
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_tool_calls"
    assert kinds(response.output) == ["mcp_list_tools", "mcp_call", "mcp_call"]
    for call in response.output[1:]:
        assert call.name == "echo" and call.server_label == "toolbox"
        assert json.loads(call.arguments) == {"text": "ping"} and call.output == "ping"
        assert call.status == "completed" and call.error is None
    assert response.max_tool_calls == 2
    # a request may lower the configured limit (3), never raise it
    capped = replay_client.responses.create(
        model="m", input="ping forever", tools=[NEVER], max_tool_calls=50
    )
    assert kinds(capped.output).count("mcp_call") == 3


def test_stream_sends_the_mcp_events_and_ends_incomplete(replay_client):
    kwargs = dict(model="m", input="ping forever", tools=[ECHO], max_tool_calls=2)
    whole = replay_client.responses.create(**kwargs)
    with replay_client.responses.stream(**kwargs) as stream:
        events = list(stream)
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.incomplete" and "response.completed" not in types
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert types[2:6] == [
        "response.output_item.added",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.output_item.done",
    ]
    one_call = [
        "response.output_item.added",
        "response.mcp_call.in_progress",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.completed",
        "response.output_item.done",
    ]
    assert types[6:-1] == one_call * 2
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [(item.type, item.output) for item in done[1:]] == [("mcp_call", "ping")] * 2
    # what the stream ends with is what the non-streamed request returns
    assert comparable_response(events[-1].response) == comparable_response(whole)


def test_chains_replay_the_mcp_calls(replay_client):
    first = replay_client.responses.create(model="m", input="ping", tools=[NEVER], max_tool_calls=1)
    assert replay_client.responses.retrieve(first.id).output[1].type == "mcp_call"
    fresh = replay_client.responses.create(model="m", input="again", max_output_tokens=5)
    chained = replay_client.responses.create(
        model="m", input="again", previous_response_id=first.id, max_output_tokens=5
    )
    # the chain's prompt holds the first input, the tool call and its result
    assert chained.usage.input_tokens > fresh.usage.input_tokens + 10
    # a stateless client sends the items back as input, and gets the same prompt
    items = [item.model_dump(exclude_none=True) for item in first.output]
    stateless = replay_client.responses.create(
        model="m",
        input=[{"role": "user", "content": "ping"}, *items, {"role": "user", "content": "again"}],
        max_output_tokens=5,
        store=False,
    )
    assert stateless.usage.input_tokens == chained.usage.input_tokens


def test_failed_calls_and_client_tools_in_one_turn(mixed_client):
    weather = {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    kwargs = dict(model="m", input="weather?", tools=[NEVER, weather])
    whole = mixed_client.responses.create(**kwargs)
    assert whole.status == "completed"
    # in the order they happened: the client's call streams as the model writes it, the
    # MCP calls run once the turn has ended
    assert kinds(whole.output) == ["mcp_list_tools", "function_call", "mcp_call", "mcp_call"]
    client_call, good, bad = whole.output[1:]
    assert good.status == "completed" and good.output == "ping"
    assert bad.status == "failed" and bad.output is None
    assert bad.error.type == "mcp_tool_execution_error" and "text" in str(bad.error.content)
    assert client_call.name == "get_weather" and json.loads(client_call.arguments) == {
        "city": "Paris"
    }
    with mixed_client.responses.stream(**kwargs) as stream:
        events = list(stream)
    types = [e.type for e in events]
    assert types.count("response.mcp_call.completed") == 1
    assert types.count("response.mcp_call.failed") == 1
    assert "response.function_call_arguments.done" in types
    assert types[-1] == "response.completed"
    assert comparable_response(events[-1].response) == comparable_response(whole)


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({**ECHO, "server_label": "nowhere"}, "tools.0.server_label"),
        ({**ECHO, "server_url": "https://example.com/mcp"}, "tools.0.server_url"),
        ({**ECHO, "require_approval": "always"}, "tools.0.require_approval"),
        ({"type": "mcp"}, "tools.0.server_label"),
    ],
)
def test_bad_mcp_tools_are_openai_400s(replay_client, tool, param):
    with pytest.raises(openai.BadRequestError) as caught:
        replay_client.responses.create(model="m", input="ping", tools=[tool])
    assert caught.value.body["param"] == param


def test_without_mcp_config_mcp_tools_are_a_400():
    runtime = build_replay_runtime(ECHO_CALL)
    try:
        with thread_server(create_app(ServerState(runtime.pipeline, "replay"))) as base:
            client = openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0)
            with pytest.raises(openai.BadRequestError, match="--mcp-config"):
                client.responses.create(model="m", input="ping", tools=[ECHO])
    finally:
        runtime.close()


def test_root_answers_head_and_get(replay_client):
    base = str(replay_client.base_url).removesuffix("/v1/")
    assert httpx.head(f"{base}/").status_code == 200
    assert httpx.get(f"{base}/").status_code == 200
