"""MCP through the real server: `serve --mcp-config` with the toolbox MCP server over stdio,
and a replayed model output that always calls a tool (so the loop must be stopped by
max_tool_calls)."""

from __future__ import annotations

import httpx
import openai
import pytest
from servers import mcp_cli_server
from shared import ECHO_CALL


@pytest.fixture(scope="module")
def mcp_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mcp")
    replay = tmp / "replay.txt"
    replay.write_text(ECHO_CALL)
    with mcp_cli_server(tmp, "--replay", str(replay)) as base:
        yield base


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
