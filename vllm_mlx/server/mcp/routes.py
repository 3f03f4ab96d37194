"""MCP over HTTP: the servers' status, their tools, and direct execution.

Everything goes through the MCP manager (and so its security checks, schema validation,
timeouts and output caps); the HTTP layer never starts or calls anything itself.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import JSONResponse

from ..errors import APIError, parse_body
from ..state import server_state


class ExecuteRequest(BaseModel):
    name: str = Field(min_length=1)
    arguments: dict[str, Any] | str = Field(default_factory=dict)


def mcp_manager(request: Request):
    manager = server_state(request).mcp
    if manager is None:
        raise APIError(404, "no MCP servers are configured (start with --mcp-config FILE)")
    return manager


async def list_servers(request: Request) -> JSONResponse:
    return JSONResponse(
        {
            "object": "list",
            "data": [
                {"name": name, **status} for name, status in mcp_manager(request).status().items()
            ],
        }
    )


async def list_tools(request: Request) -> JSONResponse:
    manager = mcp_manager(request)
    return JSONResponse(
        {
            "object": "list",
            "data": [
                {**tool, "server": manager.server_of(tool["function"]["name"])}
                for tool in manager.tools()
            ],
        }
    )


async def execute(request: Request) -> JSONResponse:
    manager = mcp_manager(request)
    body = await parse_body(request, ExecuteRequest)
    result = await manager.call_tool(body.name, body.arguments)
    return JSONResponse(
        {
            "name": body.name,
            "server": result.server,
            "output": result.text,
            "is_error": result.is_error,
            "truncated": result.truncated,
        }
    )
