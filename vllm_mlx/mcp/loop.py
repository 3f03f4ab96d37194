"""The server-side tool loop: generate, run the model's MCP tool calls, feed results back.

It knows nothing about engines or HTTP: ``generate`` turns an OpenAI-format message list into
a ``ParsedMessage``. Calls to MCP tools are executed and answered with ``tool`` messages;
the loop repeats until the model answers without MCP calls, calls a tool the client owns (those
go back to the client), or ``max_tool_calls`` MCP calls have run. Each executed call is recorded
so API adapters can emit items such as the Responses API's ``mcp_call``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from vllm_mlx.families.message import ParsedMessage, ToolCall
from vllm_mlx.mcp.executor import ToolResult

StopReason = Literal["answered", "client_tool_calls", "max_tool_calls"]


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


def assistant_turn(message: ParsedMessage) -> dict[str, Any]:
    """The model's message as an OpenAI chat ``assistant`` entry with its tool calls."""
    turn: dict[str, Any] = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        turn["tool_calls"] = message.to_openai()["tool_calls"]
    return turn


def tool_turn(call: ToolCall, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": text}


async def run_tool_loop(
    generate: Callable[[list[dict[str, Any]]], Awaitable[ParsedMessage]],
    messages: list[dict[str, Any]],
    manager: ToolRunner,
    *,
    max_tool_calls: int,
    allowed_tools: Collection[str] | None = None,
) -> LoopResult:
    """Run generate/execute rounds until an answer, client-owned calls, or the call budget.

    ``allowed_tools`` restricts which MCP tool names the loop executes for this request (e.g.
    a Responses ``mcp`` tool's ``allowed_tools``); calls to other names go back to the client.
    When the budget runs out mid-round, the calls beyond it are answered with a note instead of
    being run, and the loop stops with ``stop_reason == "max_tool_calls"``.
    """
    transcript = list(messages)
    result = LoopResult(message=ParsedMessage(), messages=transcript)

    def is_ours(name: str) -> bool:
        allowed = allowed_tools is None or name in allowed_tools
        return allowed and manager.is_mcp_tool(name)

    while True:
        message = await generate(transcript)
        result.generations += 1
        result.message = message
        if not message.tool_calls:
            transcript.append(assistant_turn(message))
            result.stop_reason = "answered"
            return result
        ours = [c for c in message.tool_calls if is_ours(c.name)]
        theirs = [c for c in message.tool_calls if not is_ours(c.name)]
        budget = max(0, max_tool_calls - len(result.calls))
        to_run, skipped = ours[:budget], ours[budget:]
        outputs = await asyncio.gather(*(manager.call_tool(c.name, c.arguments) for c in to_run))
        transcript.append(assistant_turn(message))
        for call, output in zip(to_run, outputs, strict=True):
            transcript.append(tool_turn(call, output.text))
            result.calls.append(
                LoopCall(
                    id=call.id,
                    server=manager.server_of(call.name) or output.server,
                    name=call.name,
                    arguments=call.arguments,
                    output=output.text,
                    error=output.text if output.is_error else None,
                    result=output,
                )
            )
        for call in skipped:
            transcript.append(
                tool_turn(
                    call, f"Not executed: the limit of {max_tool_calls} tool calls was reached."
                )
            )
        if theirs:
            result.pending_tool_calls = theirs
            result.stop_reason = "client_tool_calls"
            return result
        if skipped:
            result.stop_reason = "max_tool_calls"
            return result
