"""The server-side MCP tool loop for chat completions.

A chat request opts in with ``"mcp": true`` (every configured server) or
``"mcp": {"servers": [...], "max_tool_calls": N}``. The model sees the client's tools plus
the MCP tools; calls to MCP tools run here and their results feed the next turn, up to
``max_tool_calls`` (capped by the config); calls to the client's own tools end the loop and
return to the client as usual.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pydantic import BaseModel, Field

from ..families.message import ParsedMessage
from ..mcp.loop import run_tool_loop
from ..pipeline import ChatRequest, ChatResult, Usage
from .errors import APIError
from .state import ServerState


class MCPOptions(BaseModel):
    servers: list[str] | None = None
    max_tool_calls: int | None = Field(default=None, ge=1)


def mcp_options(value: Any) -> MCPOptions | None:
    """The request's ``mcp`` field: absent/false -> None, true -> all servers."""
    if value in (None, False):
        return None
    if value is True:
        return MCPOptions()
    if isinstance(value, dict):
        try:
            return MCPOptions.model_validate(value)
        except ValueError as exc:
            raise APIError(400, f"mcp: {exc}", param="mcp") from None
    raise APIError(400, 'mcp must be true or {"servers": [...], "max_tool_calls": N}', param="mcp")


async def run_mcp_chat(
    state: ServerState, request: ChatRequest, options: MCPOptions
) -> tuple[ChatResult, list[dict]]:
    """Run the loop; returns the final result (usage summed over every turn) and the MCP
    calls made, for the response's ``mcp_calls`` field."""
    manager = state.mcp
    if manager is None:
        raise APIError(400, "mcp requested but no MCP servers are configured", param="mcp")
    unknown = set(options.servers or []) - set(manager.status())
    if unknown:
        raise APIError(
            400, f"unknown MCP server(s): {', '.join(sorted(unknown))}", param="mcp.servers"
        )
    tools = [*(request.tools or []), *manager.tools(options.servers)]
    limit = manager.config.max_tool_calls
    budget = min(options.max_tool_calls or limit, limit)
    results: list[ChatResult] = []

    async def generate(messages: list[dict]) -> ParsedMessage:
        first = not results
        turn = replace(
            request,
            messages=messages,
            tools=tools,
            tool_choice=request.tool_choice if first else "auto",
        )
        result = await state.pipeline.complete(state.pipeline.prepare_chat(turn))
        if result.finish_reason == "error":
            raise APIError(500, f"generation failed: {result.error}")
        results.append(result)
        return result.message

    loop = await run_tool_loop(generate, request.messages, manager, max_tool_calls=budget)
    last = results[-1]
    usage = Usage.summed(r.usage for r in results)
    # MCP calls were answered here; only the client's own calls go back to it
    message = replace(loop.message, tool_calls=list(loop.pending_tool_calls))
    reason = "tool_calls" if message.tool_calls else "length" if loop.cut_off else "stop"
    final = replace(last, message=message, usage=usage, finish_reason=reason)
    calls = [
        {
            "id": c.id,
            "server": c.server,
            "name": c.name,
            "arguments": c.arguments,
            "output": c.output,
            "error": c.error,
        }
        for c in loop.calls
    ]
    return final, calls
