"""The server-side tool loop: generate, run the model's MCP tool calls, feed results back.

It knows nothing about engines or HTTP: a ``turn`` turns an OpenAI-format message list into
the generation's own events, ending with its ``ParsedMessage``. The loop passes those events
through as they come and adds its own: each MCP call as it starts (``CallStarted``) and as
it finishes (``CallFinished``), and its ``LoopResult`` last. Calls to MCP tools are executed
and answered with ``tool`` messages; the loop repeats until the model answers without MCP
calls, calls a tool the client owns (those go back to the client), or ``max_tool_calls`` MCP
calls have run.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from vllm_mlx.families.message import ParsedMessage, ToolCall
from vllm_mlx.mcp.executor import ToolResult

StopReason = Literal["answered", "client_tool_calls", "max_tool_calls"]
E = TypeVar("E")


class ToolRunner(Protocol):
    """What the loop needs from MCPManager (a protocol so adapters can wrap it)."""

    def is_mcp_tool(self, name: str) -> bool: ...

    def server_of(self, name: str) -> str | None: ...

    async def call_tool(self, name: str, arguments: dict[str, Any] | str | None) -> ToolResult: ...


@dataclass
class LoopCall:
    """One executed MCP call, in the order the model made them."""

    id: str
    server: str | None
    name: str
    arguments: str
    output: str
    error: str | None
    result: ToolResult


@dataclass
class CallStarted:
    """An MCP call the loop is about to run (a round's calls start in the model's order)."""

    call: ToolCall
    server: str | None


@dataclass
class CallFinished:
    """An MCP call that has returned (calls of one round finish in any order)."""

    call: LoopCall


@dataclass
class LoopResult:
    message: ParsedMessage  # the model's last message
    messages: list[dict[str, Any]]  # the input messages plus every turn the loop added
    calls: list[LoopCall] = field(default_factory=list)
    stop_reason: StopReason = "answered"
    pending_tool_calls: list[ToolCall] = field(default_factory=list)  # client-owned calls
    generations: int = 0

    @property
    def cut_off(self) -> bool:
        """True when the loop stopped at max_tool_calls rather than on an answer."""
        return self.stop_reason == "max_tool_calls"


Turn = Callable[[list[dict[str, Any]]], AsyncIterator[E | ParsedMessage]]


def executes(manager: ToolRunner, allowed_tools: Collection[str] | None, name: str) -> bool:
    """Whether the loop runs a call of ``name`` (an MCP tool the request may use)."""
    allowed = allowed_tools is None or name in allowed_tools
    return allowed and manager.is_mcp_tool(name)


def assistant_turn(message: ParsedMessage) -> dict[str, Any]:
    """The model's message as an OpenAI chat ``assistant`` entry with its tool calls."""
    turn: dict[str, Any] = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        turn["tool_calls"] = message.to_openai()["tool_calls"]
    return turn


def tool_turn(call: ToolCall, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": text}


async def run_tool_loop(
    turn: Turn[E],
    messages: list[dict[str, Any]],
    manager: ToolRunner,
    *,
    max_tool_calls: int,
    allowed_tools: Collection[str] | None = None,
) -> AsyncGenerator[E | CallStarted | CallFinished | LoopResult, None]:
    """Run generate/execute rounds until an answer, client-owned calls, or the call budget,
    yielding every turn's events and every call as it happens; the ``LoopResult`` comes last.

    ``allowed_tools`` restricts which MCP tool names the loop executes for this request (e.g.
    a Responses ``mcp`` tool's ``allowed_tools``); calls to other names go back to the client.
    When the budget runs out mid-round, the calls beyond it are answered with a note instead of
    being run, and the loop stops with ``stop_reason == "max_tool_calls"``.
    """
    transcript = list(messages)
    result = LoopResult(message=ParsedMessage(), messages=transcript)
    while True:
        message: ParsedMessage | None = None
        async for item in turn(transcript):
            if isinstance(item, ParsedMessage):
                message = item
            else:
                yield item
        if message is None:
            raise RuntimeError("a turn ended without its message")
        result.generations += 1
        result.message = message
        if not message.tool_calls:
            transcript.append(assistant_turn(message))
            result.stop_reason = "answered"
            yield result
            return
        ours = [c for c in message.tool_calls if executes(manager, allowed_tools, c.name)]
        theirs = [c for c in message.tool_calls if not executes(manager, allowed_tools, c.name)]
        budget = max(0, max_tool_calls - len(result.calls))
        to_run, skipped = ours[:budget], ours[budget:]
        for call in to_run:
            yield CallStarted(call, manager.server_of(call.name))
        finished: dict[int, LoopCall] = {}
        async for index, done in _calls(manager, to_run):
            finished[index] = done
            yield CallFinished(done)
        transcript.append(assistant_turn(message))
        for index, call in enumerate(to_run):
            transcript.append(tool_turn(call, finished[index].output))
            result.calls.append(finished[index])
        for call in skipped:
            transcript.append(
                tool_turn(
                    call, f"Not executed: the limit of {max_tool_calls} tool calls was reached."
                )
            )
        if theirs or skipped:
            result.pending_tool_calls = theirs
            result.stop_reason = "client_tool_calls" if theirs else "max_tool_calls"
            yield result
            return


async def _calls(
    manager: ToolRunner, calls: list[ToolCall]
) -> AsyncGenerator[tuple[int, LoopCall], None]:
    """Run ``calls`` at once; each (its index, the call) as it finishes. Leaving early
    cancels the rest."""
    tasks = {
        asyncio.ensure_future(manager.call_tool(c.name, c.arguments)): (i, c)
        for i, c in enumerate(calls)
    }
    pending = set(tasks)
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task, (index, call) in tasks.items():  # model order among those done at once
                if task in done:
                    output = task.result()
                    yield (
                        index,
                        LoopCall(
                            id=call.id,
                            server=manager.server_of(call.name) or output.server,
                            name=call.name,
                            arguments=call.arguments,
                            output=output.text,
                            error=output.text if output.is_error else None,
                            result=output,
                        ),
                    )
    finally:
        for task in pending:
            task.cancel()
