"""MCP over HTTP: the servers' status, their tools, and direct execution.

Everything goes through the MCP manager (and so its security checks, schema validation,
timeouts and output caps); the HTTP layer never starts or calls anything itself.

Scripts written against upstream vllm-mlx keep working: ``execute`` takes its ``tool_name``
(``name`` is the alias) and answers with its ``tool_name``/``content``/``error_message``
beside ours; the listings carry its ``tools``/``count`` and ``servers`` keys beside ``data``;
``GET /v1/mcp/status``, which upstream documents, exists here.
"""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, BaseModel, Field
from starlette.requests import Request
from starlette.responses import JSONResponse

from ..errors import APIError, parse_body
from ..state import server_state


class ExecuteRequest(BaseModel):
    name: str = Field(min_length=1, validation_alias=AliasChoices("tool_name", "name"))
    arguments: dict[str, Any] | str = Field(default_factory=dict)


def mcp_manager(request: Request):
    manager = server_state(request).mcp
    if manager is None:
        raise APIError(404, "no MCP servers are configured (start with --mcp-config FILE)")
    return manager


def _servers(manager) -> list[dict[str, Any]]:
    """Each server's status, with upstream's field names (``tools_count``, ``error``) too."""
    return [
        {"name": name, **s, "tools_count": s["tools"], "error": s["last_error"]}
        for name, s in manager.status().items()
    ]


async def list_servers(request: Request) -> JSONResponse:
    servers = _servers(mcp_manager(request))
    return JSONResponse({"object": "list", "data": servers, "servers": servers})


async def status(request: Request) -> JSONResponse:
    """Whether MCP is on, and each server's state (answers without ``--mcp-config`` too)."""
    manager = server_state(request).mcp
    if manager is None:
        return JSONResponse({"enabled": False, "servers": [], "tools_count": 0})
    servers = _servers(manager)
    return JSONResponse({"enabled": True, "servers": servers, "tools_count": len(manager.tools())})


async def list_tools(request: Request) -> JSONResponse:
    manager = mcp_manager(request)
    tools = [
        {**tool, "server": manager.server_of(tool["function"]["name"])} for tool in manager.tools()
    ]
    upstream = [
        {
            "name": t["function"]["name"],
            "description": t["function"].get("description", ""),
            "server": t["server"],
            "parameters": t["function"].get("parameters", {}),
        }
        for t in tools
    ]
    return JSONResponse({"object": "list", "data": tools, "tools": upstream, "count": len(tools)})


async def execute(request: Request) -> JSONResponse:
    manager = mcp_manager(request)
    body = await parse_body(request, ExecuteRequest)
    result = await manager.call_tool(body.name, body.arguments)
    return JSONResponse(
        {
            "name": body.name,
            "tool_name": body.name,
            "server": result.server,
            "output": result.text,
            "content": result.text,
            "is_error": result.is_error,
            "error_message": result.text if result.is_error else None,
            "truncated": result.truncated,
        }
    )
