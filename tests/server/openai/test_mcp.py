"""MCP through the real server: `serve --mcp-config` with the toolbox MCP server over stdio,
and a replayed model output that always calls a tool (so the loop must be stopped by
max_tool_calls): answered whole, and streamed live through the same event path."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from servers import mcp_cli_server
from shared import ECHO_CALL


@pytest.fixture(scope="module")
def mcp_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mcp")
    replay = tmp / "replay.txt"
    replay.write_text("Checking. " + ECHO_CALL)
    with mcp_cli_server(tmp, "--replay", str(replay)) as base:
        yield base


# a turn that calls a tool returning only once the test opens its gate, and one whose output
# (100 kB, the configured cap) cannot fit the next turn's 2048-token context
GATED = (
    "Checking. "
    '<tool_call>\n{"name": "wait_for_gate", "arguments": {}}\n</tool_call>\n'
    '<tool_call>\n{"name": "big_output", "arguments": {"megabytes": 1}}\n</tool_call>'
)


@pytest.fixture(scope="module")
def gated_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mcp_gated")
    replay = tmp / "replay.txt"
    replay.write_text(GATED)
    with mcp_cli_server(tmp, "--replay", str(replay), "--max-model-len", "2048") as base:
        yield base


def sse_data(line: str) -> dict | str | None:
    if not line.startswith("data: "):
        return None
    data = line.removeprefix("data: ")
    return data if data == "[DONE]" else json.loads(data)


def test_health_and_listing_report_the_server(mcp_server):
    health = httpx.get(f"{mcp_server}/health").json()
    assert health["mcp"]["toolbox"]["state"] == "connected"
    servers = httpx.get(f"{mcp_server}/v1/mcp/servers").json()["data"]
    assert [s["name"] for s in servers] == ["toolbox"]
    names = {t["function"]["name"] for t in httpx.get(f"{mcp_server}/v1/mcp/tools").json()["data"]}
    assert {"echo", "sleep", "big_output"} <= names


def test_execute_runs_the_tool_and_reports_errors_as_results(mcp_server):
    ok = httpx.post(
        f"{mcp_server}/v1/mcp/execute", json={"name": "echo", "arguments": {"text": "hi"}}
    ).json()
    assert ok["is_error"] is False and "hi" in ok["output"]
    bad = httpx.post(
        f"{mcp_server}/v1/mcp/execute", json={"name": "echo", "arguments": {"text": 5}}
    ).json()
    assert bad["is_error"] is True
    unknown = httpx.post(f"{mcp_server}/v1/mcp/execute", json={"name": "nope"}).json()
    assert unknown["is_error"] is True


def test_upstream_vllm_mlx_shapes(mcp_server):
    """Scripts written against upstream vllm-mlx: tool_name, status, tools/count, servers."""
    ran = httpx.post(
        f"{mcp_server}/v1/mcp/execute", json={"tool_name": "echo", "arguments": {"text": "hi"}}
    ).json()
    assert ran["tool_name"] == "echo" and "hi" in ran["content"] and ran["error_message"] is None
    status = httpx.get(f"{mcp_server}/v1/mcp/status").json()
    assert status["enabled"] is True and status["tools_count"] >= 3
    assert status["servers"][0]["state"] == "connected"
    tools = httpx.get(f"{mcp_server}/v1/mcp/tools").json()
    assert tools["count"] == len(tools["tools"]) and {"name", "server"} <= set(tools["tools"][0])
    (server,) = httpx.get(f"{mcp_server}/v1/mcp/servers").json()["servers"]
    assert server["tools_count"] >= 3 and server["transport"] == "stdio"


def test_chat_tool_loop_stops_at_max_tool_calls(mcp_server):
    client = openai.OpenAI(base_url=f"{mcp_server}/v1", api_key="unused", max_retries=0)
    reply = client.chat.completions.create(
        model="x",
        messages=[{"role": "user", "content": "ping forever"}],
        extra_body={"mcp": {"max_tool_calls": 2}},
    )
    calls = reply.model_extra["mcp_calls"]
    assert len(calls) == 2
    assert all(c["name"] == "echo" and c["server"] == "toolbox" for c in calls)
    assert "ping" in calls[0]["output"]
    assert reply.choices[0].finish_reason == "length"  # cut by the budget, not an answer
    assert reply.choices[0].message.tool_calls is None  # MCP calls never go to the client


def test_chat_without_opt_in_returns_the_call_to_the_client(mcp_server):
    client = openai.OpenAI(base_url=f"{mcp_server}/v1", api_key="unused", max_retries=0)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "echo",
                "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
            },
        }
    ]
    reply = client.chat.completions.create(
        model="x", messages=[{"role": "user", "content": "ping"}], tools=tools
    )
    assert reply.choices[0].finish_reason == "tool_calls"
    assert "mcp_calls" not in (reply.model_extra or {})


def test_a_streamed_loop_answers_live_and_fails_mid_loop_in_openai_shape(gated_server):
    """The first frames arrive while the first turn's tool is still running (it cannot
    return before the test opens its gate); the next turn cannot fit its context, which
    ends the stream with the error table's 400, a terminal chunk and [DONE], as the same
    request not streamed answers with that 400."""
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "check"}],
        "mcp": True,
        "stream": True,
    }
    url = f"{gated_server}/v1/chat/completions"
    with httpx.stream("POST", url, json=body, timeout=30) as response:
        assert response.status_code == 200
        frames = (f for f in map(sse_data, response.iter_lines()) if f is not None)
        early = []
        while "Checking." not in "".join(
            (c["choices"][0]["delta"].get("content") or "") for c in early if c.get("choices")
        ):
            early.append(next(frames))
        assert early[0]["choices"][0]["delta"]["role"] == "assistant"
        # the gate is still shut: the loop's first call has not returned, yet frames came
        opened = httpx.post(f"{gated_server}/v1/mcp/execute", json={"name": "open_gate"})
        assert opened.json()["output"] == "opened"
        late = list(frames)
    error, terminal, done = late[-3:]
    assert done == "[DONE]" and late.count("[DONE]") == 1
    assert terminal["choices"][0]["finish_reason"] == "error"
    assert "after 1 turns" in error["error"]["message"]
    assert not any(
        (c["choices"] and c["choices"][0]["delta"].get("tool_calls")) for c in early + late[:-3]
    )  # the loop's own calls are never shown to the client
    whole = httpx.post(url, json={**body, "stream": False}, timeout=120)
    assert whole.status_code == 400
    assert whole.json()["error"] == error["error"]


def test_a_streamed_loop_is_its_answer(mcp_server):
    """The stream, put back together as a client does, is the non-streamed answer: every
    turn's text, no MCP calls in tool_calls, the budget's finish, the calls and the usage."""
    client = openai.OpenAI(base_url=f"{mcp_server}/v1", api_key="unused", max_retries=0)
    kwargs = dict(
        model="x",
        messages=[{"role": "user", "content": "ping forever"}],
        extra_body={"mcp": {"max_tool_calls": 2}},
    )
    whole = client.chat.completions.create(**kwargs)
    chunks = list(
        client.chat.completions.create(
            **kwargs, stream=True, stream_options={"include_usage": True}
        )
    )
    content = "".join((c.choices[0].delta.content or "") for c in chunks if c.choices)
    assert content == whole.choices[0].message.content
    assert content.count("Checking.") == 3  # each of the three turns, as it was written
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    (finish,) = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish.choices[0].finish_reason == whole.choices[0].finish_reason == "length"

    def calls(extra) -> list[dict]:
        return [{k: v for k, v in c.items() if k != "id"} for c in extra["mcp_calls"]]

    assert calls(finish.model_extra) == calls(whole.model_extra)
    assert len(calls(whole.model_extra)) == 2
    assert chunks[-1].usage == whole.usage and whole.usage.completion_tokens > 0
