"""MCPManager and executor against real MCP servers (stdio, streamable HTTP, SSE, PyPI's time).

Every failure mode must come back as an error result the model can read, and the manager must
keep serving the other servers (and the same server, once restarted).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator

import pytest
from mcp_servers.harness import (
    TOOLBOX,
    free_port,
    time_server_stdio,
    toolbox_http,
    toolbox_stdio,
)

from vllm_mlx.mcp.config import parse_config
from vllm_mlx.mcp.manager import MCPManager

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def http_port() -> Iterator[int]:
    with toolbox_http("--http") as port:
        yield port


@pytest.fixture(scope="module")
def sse_port() -> Iterator[int]:
    with toolbox_http("--sse") as port:
        yield port


SECRETS = {"VLLM_MLX_API_KEY": "server-secret", "OPENAI_API_KEY": "sk-secret"}


@pytest.fixture(scope="module")
async def manager(http_port: int, sse_port: int) -> AsyncIterator[MCPManager]:
    """One manager over every kind of server, started with secrets in our environment."""
    config = parse_config(
        {
            "mcpServers": {
                "box": toolbox_stdio(timeout=3, env={"TOOL_TOKEN": "given"}),
                "web": {
                    "url": f"http://127.0.0.1:{http_port}/mcp",
                    "timeout": 3,
                    "blocked_tools": ["crash"],
                },
                "old": {
                    "url": f"http://127.0.0.1:{sse_port}/sse",
                    "type": "sse",
                    "allowed_tools": ["echo"],
                },
                "time": time_server_stdio(),
                "broken": {"command": "/nonexistent/bin/python3", "args": [TOOLBOX]},
                "gone": {"url": f"http://127.0.0.1:{free_port()}/mcp"},
                "off": toolbox_stdio(enabled=False),
            },
            "max_output_bytes": 2000,
            "max_parallel_calls": 2,
            "connect_timeout": 20,
        }
    )
    saved = {key: os.environ.get(key) for key in SECRETS}
    os.environ.update(SECRETS)
    try:
        async with MCPManager(config) as running:
            yield running
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
async def restartable() -> AsyncIterator[MCPManager]:
    """A separate stdio server for tests that crash it or change its tool list."""
    async with MCPManager(parse_config({"mcpServers": {"box": toolbox_stdio()}})) as running:
        yield running


async def wait_for_state(manager: MCPManager, server: str, state: str) -> None:
    for _ in range(300):
        if manager.status()[server]["state"] == state:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{server} never reached {state}: {manager.status()[server]}")


def names(manager: MCPManager) -> set[str]:
    return {tool["function"]["name"] for tool in manager.tools()}


async def test_status_reports_each_server(manager):
    status = manager.status()
    assert status["box"]["state"] == "connected"
    assert status["web"]["state"] == "connected"
    assert status["web"]["transport"] == "streamable_http"
    assert (status["old"]["state"], status["old"]["transport"]) == ("connected", "sse")
    assert status["time"]["state"] == "connected" and status["time"]["tools"] == 2
    assert status["broken"]["state"] in {"failed", "connecting"}
    assert "No such file" in status["broken"]["last_error"]
    assert status["gone"]["state"] in {"failed", "connecting"} and status["gone"]["last_error"]
    assert status["off"]["state"] == "disabled"


async def test_clashing_names_are_namespaced_and_unique_ones_are_not(manager):
    offered = names(manager)
    assert {"box__echo", "web__echo", "old__echo", "box__sleep", "web__sleep"} <= offered
    assert "echo" not in offered and "old__sleep" not in offered  # old allows only echo
    assert {"get_current_time", "convert_time"} <= offered
    # blocked on web, so box's crash is the only one offered and keeps its plain name
    assert "crash" in offered and "web__crash" not in offered


async def test_tools_are_in_openai_format(manager):
    tool = next(t for t in manager.tools() if t["function"]["name"] == "get_current_time")
    assert tool["type"] == "function"
    assert tool["function"]["parameters"]["type"] == "object"
    assert "timezone" in tool["function"]["parameters"]["properties"]
    assert tool["function"]["description"]
    assert {t["function"]["name"] for t in manager.tools(servers=["time"])} == {
        "get_current_time",
        "convert_time",
    }


@pytest.mark.parametrize("tool", ["box__echo", "web__echo", "old__echo"])
async def test_echo_over_stdio_and_http(manager, tool):
    result = await manager.call_tool(tool, '{"text": "héllo"}')
    assert (result.text, result.is_error) == ("héllo", False)
    assert result.content == [{"type": "text", "text": "héllo"}]
    assert result.server == tool.split("__")[0]


async def test_pypi_time_server(manager):
    result = await manager.call_tool("get_current_time", {"timezone": "UTC"})
    assert not result.is_error
    assert json.loads(result.text)["timezone"] == "UTC"


async def test_server_side_error_is_an_error_result(manager):
    result = await manager.call_tool("get_current_time", {"timezone": "Not/AZone"})
    assert result.is_error
    assert "Not/AZone" in result.text


@pytest.mark.parametrize("tool", ["box__sleep", "web__sleep"])
async def test_timeout_is_an_error_result_and_the_server_survives(manager, tool):
    result = await manager.call_tool(tool, {"seconds": 30})
    assert result.is_error
    assert "timed out after 3s" in result.text
    after = await manager.call_tool(tool.replace("sleep", "echo"), {"text": "still here"})
    assert after.text == "still here"


@pytest.mark.parametrize("tool", ["box__big_output", "web__big_output"])
async def test_megabytes_of_output_are_capped_with_a_note(manager, tool):
    result = await manager.call_tool(tool, {"megabytes": 2})
    assert not result.is_error and result.truncated
    head, note = result.text.rsplit("\n", 1)
    assert head == "x" * 2000
    assert note == "[output truncated: 2097152 bytes total, first 2000 bytes shown]"
    assert "omitted" in result.content[0]["text"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"text": 5}, "invalid arguments at text: 5 is not of type 'string'"),
        ({}, "invalid arguments: 'text' is a required property"),
        ("{not json", "arguments are not valid JSON"),
        ("[1, 2]", "arguments must be a JSON object"),
    ],
)
async def test_bad_arguments_never_reach_the_server(manager, arguments, message):
    result = await manager.call_tool("box__echo", arguments)
    assert result.is_error
    assert message in result.text


async def test_unknown_tool_lists_the_available_ones(manager):
    result = await manager.call_tool("no_such_tool", {})
    assert result.is_error
    assert "unknown tool 'no_such_tool'" in result.text and "get_current_time" in result.text


async def test_blocked_tool_says_why(manager):
    result = await manager.call_tool("web__crash", {})
    assert result.is_error and "blocked_tools" in result.text
    assert manager.status()["web"]["state"] == "connected"


async def test_image_result_is_described_for_the_model(manager):
    result = await manager.call_tool("box__picture", {})
    assert result.text == "[image: image/png, 32 bytes]"
    assert result.content[0]["type"] == "image"


async def test_our_secrets_do_not_reach_child_processes(manager):
    seen = {
        key: (await manager.call_tool("box__env_value", {"key": key})).text
        for key in (*SECRETS, "TOOL_TOKEN")
    }
    assert seen == {
        "VLLM_MLX_API_KEY": "<unset>",
        "OPENAI_API_KEY": "<unset>",
        "TOOL_TOKEN": "given",
    }


async def test_concurrency_is_limited_to_max_parallel_calls(manager):
    results = await asyncio.gather(
        *(manager.call_tool("box__hold", {"seconds": 0.2}) for _ in range(6))
    )
    assert [r.text for r in results] == ["held"] * 6
    assert (await manager.call_tool("box__peak_concurrency", {})).text == "2"


async def test_crashed_stdio_server_is_an_error_result_then_restarted(restartable):
    manager = restartable
    crashed = await manager.call_tool("crash", {})
    assert crashed.is_error and "closed the connection" in crashed.text
    await wait_for_state(manager, "box", "connected")
    assert manager.status()["box"]["restarts"] == 1
    assert (await manager.call_tool("echo", {"text": "back"})).text == "back"


async def test_tool_list_change_is_picked_up(restartable):
    manager = restartable
    await wait_for_state(manager, "box", "connected")
    assert "fresh_tool" not in names(manager)
    await manager.call_tool("add_tool", {"name": "fresh_tool"})
    for _ in range(200):
        if "fresh_tool" in names(manager):
            break
        await asyncio.sleep(0.05)
    assert (await manager.call_tool("fresh_tool", {})).text == "hello from fresh_tool"
    # a high-risk name announced later is not offered unless allowed
    await manager.call_tool("add_tool", {"name": "run_command"})
    for _ in range(200):
        if manager.is_mcp_tool("run_command"):
            break
        await asyncio.sleep(0.05)
    assert "run_command" not in names(manager)
    blocked = await manager.call_tool("run_command", {})
    assert blocked.is_error and "allowed_high_risk_tools" in blocked.text
