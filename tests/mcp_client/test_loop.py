"""The server-side tool loop with a scripted model and real MCP servers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from mcp_servers.harness import time_server_stdio, toolbox_stdio

from vllm_mlx.families.message import ParsedMessage, ToolCall
from vllm_mlx.mcp.config import parse_config
from vllm_mlx.mcp.loop import CallFinished, CallStarted, LoopResult
from vllm_mlx.mcp.loop import run_tool_loop as tool_loop
from vllm_mlx.mcp.manager import MCPManager

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def manager() -> AsyncIterator[MCPManager]:
    config = parse_config({"mcpServers": {"box": toolbox_stdio(), "time": time_server_stdio()}})
    async with MCPManager(config) as running:
        yield running


class ScriptedModel:
    """Stands in for the engine: replies from a script (a text event, then the message)
    and records what it was shown."""

    def __init__(self, replies: list[ParsedMessage]):
        self.replies = list(replies)
        self.seen: list[list[dict]] = []

    async def __call__(self, messages: list[dict]) -> AsyncIterator[str | ParsedMessage]:
        self.seen.append([dict(m) for m in messages])
        reply = self.replies.pop(0)
        yield f"turn {len(self.seen)}"
        yield reply


async def run_tool_loop(model, messages, manager, **options) -> LoopResult:
    """The loop run to its end; its events in ``model.events``."""
    model.events = [event async for event in tool_loop(model, messages, manager, **options)]
    result = model.events[-1]
    assert isinstance(result, LoopResult)
    assert not any(isinstance(e, LoopResult) for e in model.events[:-1])
    return result


def call(id_: str, name: str, **arguments: object) -> ToolCall:
    return ToolCall(id=id_, name=name, arguments=json.dumps(arguments))


def says(text: str, *calls: ToolCall) -> ParsedMessage:
    return ParsedMessage(content=text, tool_calls=list(calls))


USER = [{"role": "user", "content": "What time is it in UTC? Echo 'hi' too."}]


async def test_calls_run_and_results_feed_the_next_turn(manager):
    model = ScriptedModel(
        [
            says(
                None, call("c1", "get_current_time", timezone="UTC"), call("c2", "echo", text="hi")
            ),
            says("It is late, and hi."),
        ]
    )
    result = await run_tool_loop(model, USER, manager, max_tool_calls=5)
    assert result.stop_reason == "answered" and not result.cut_off
    assert result.message.content == "It is late, and hi."
    assert result.generations == 2
    assert [(c.server, c.name, c.error) for c in result.calls] == [
        ("time", "get_current_time", None),
        ("box", "echo", None),
    ]
    assert json.loads(result.calls[0].output)["timezone"] == "UTC"
    second_prompt = model.seen[1]
    assert second_prompt[0] == USER[0]
    assistant = second_prompt[1]
    assert assistant["role"] == "assistant"
    assert [tc["function"]["name"] for tc in assistant["tool_calls"]] == [
        "get_current_time",
        "echo",
    ]
    assert second_prompt[2]["role"] == "tool" and second_prompt[2]["tool_call_id"] == "c1"
    assert second_prompt[3] == {
        "role": "tool",
        "tool_call_id": "c2",
        "name": "echo",
        "content": "hi",
    }
    assert result.messages[-1] == {"role": "assistant", "content": "It is late, and hi."}
    assert USER == [{"role": "user", "content": "What time is it in UTC? Echo 'hi' too."}]


async def test_max_tool_calls_stops_a_model_that_never_answers(manager):
    model = ScriptedModel([says(None, call(f"c{i}", "echo", text=str(i))) for i in range(50)])
    result = await run_tool_loop(model, USER, manager, max_tool_calls=3)
    assert result.cut_off and result.stop_reason == "max_tool_calls"
    assert [c.output for c in result.calls] == ["0", "1", "2"]
    assert result.generations == 4
    assert "limit of 3 tool calls" in result.messages[-1]["content"]


async def test_budget_running_out_mid_round_answers_the_rest_with_a_note(manager):
    model = ScriptedModel([says(None, *(call(f"c{i}", "echo", text=str(i)) for i in range(3)))])
    result = await run_tool_loop(model, USER, manager, max_tool_calls=2)
    assert result.cut_off
    assert [c.id for c in result.calls] == ["c0", "c1"]
    tool_turns = [m for m in result.messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_turns] == ["c0", "c1", "c2"]
    assert tool_turns[2]["content"].startswith("Not executed")


async def test_tool_errors_are_shown_to_the_model(manager):
    model = ScriptedModel(
        [
            says(None, call("c1", "echo", text=5), call("c2", "sleep_forever")),
            says("Sorry."),
        ]
    )
    result = await run_tool_loop(model, USER, manager, max_tool_calls=5, allowed_tools=None)
    # sleep_forever is not an MCP tool, so it goes back to the client untouched
    assert result.stop_reason == "client_tool_calls"
    assert [c.name for c in result.pending_tool_calls] == ["sleep_forever"]
    assert result.calls[0].error and "not of type 'string'" in result.calls[0].error
    assert result.messages[-1]["content"].startswith("Error: invalid arguments")


async def test_allowed_tools_limits_what_the_loop_executes(manager):
    model = ScriptedModel([says(None, call("c1", "echo", text="x"))])
    result = await run_tool_loop(
        model, USER, manager, max_tool_calls=5, allowed_tools={"get_current_time"}
    )
    assert result.calls == []
    assert result.stop_reason == "client_tool_calls"
    assert [c.id for c in result.pending_tool_calls] == ["c1"]


async def test_crash_inside_the_loop_is_an_error_result_and_the_loop_goes_on(manager):
    model = ScriptedModel([says(None, call("c1", "crash")), says("The tool crashed.")])
    result = await run_tool_loop(model, USER, manager, max_tool_calls=5)
    assert result.stop_reason == "answered"
    assert result.calls[0].server == "box" and "closed the connection" in result.calls[0].error
    assert model.seen[1][-1]["content"] == result.calls[0].output


async def test_events_come_as_they_happen():
    """Each turn's own events pass through before its calls run; each call starts, then
    finishes (the slower one last), before the next turn; the result comes last."""
    model = ScriptedModel(
        [
            says(None, call("slow", "sleep", seconds=0.3), call("fast", "echo", text="hi")),
            says("ok"),
        ]
    )
    async with MCPManager(parse_config({"mcpServers": {"box": toolbox_stdio()}})) as manager:
        result = await run_tool_loop(model, USER, manager, max_tool_calls=5)
    assert [(c.id, c.output, c.error) for c in result.calls] == [
        ("slow", "slept 0.3", None),
        ("fast", "hi", None),
    ]
    steps = [
        e
        if isinstance(e, str)
        else (type(e).__name__, e.call.id)
        if isinstance(e, CallStarted | CallFinished)
        else type(e).__name__
        for e in model.events
    ]
    assert steps == [
        "turn 1",
        ("CallStarted", "slow"),
        ("CallStarted", "fast"),
        ("CallFinished", "fast"),
        ("CallFinished", "slow"),
        "turn 2",
        "LoopResult",
    ]
