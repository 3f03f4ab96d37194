"""The MCP tool loop on chat completions: the ``mcp`` request field and the
``mcp_calls`` it reports.

A chat request opts in with ``"mcp": true`` (every configured server) or
``"mcp": {"servers": [...], "max_tool_calls": N}``. The model sees the client's tools plus
the MCP tools; calls to MCP tools run here (``server/mcp/tool_loop.py``) and their results
feed the next turn; calls to the client's own tools end the loop and return to the client
as usual.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pydantic import BaseModel, Field

from ...mcp.loop import LoopResult
from ...request import ChatRequest
from ..errors import APIError


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


def with_mcp_tools(chat: ChatRequest, manager: Any, options: MCPOptions) -> ChatRequest:
    """The request as the model sees it in the loop: the client's tools plus the chosen
    servers' (400 without MCP servers or for an unknown one)."""
    if manager is None:
        raise APIError(400, "mcp requested but no MCP servers are configured", param="mcp")
    unknown = set(options.servers or []) - set(manager.status())
    if unknown:
        raise APIError(
            400, f"unknown MCP server(s): {', '.join(sorted(unknown))}", param="mcp.servers"
        )
    return replace(chat, tools=[*(chat.tools or []), *manager.tools(options.servers)])


def mcp_calls(loop: LoopResult) -> list[dict]:
    """The executed calls, for the response's ``mcp_calls`` field."""
    return [
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
