"""Run one tool call on its server and always hand back a result the model can read.

Arguments are checked against the tool's input schema before anything is sent; the call runs
under the per-server timeout and the global concurrency limit; the output is converted to text
and capped. Every failure (unknown or blocked tool, bad arguments, timeout, a server that
crashed or errored) becomes an error ``ToolResult``: a model's bad call must never turn into an
exception in the HTTP server.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import anyio
import jsonschema
import mcp_types as types
from mcp.shared.exceptions import MCPError

from vllm_mlx.mcp.catalog import CatalogEntry
from vllm_mlx.mcp.connection import ServerConnection, describe_error
from vllm_mlx.mcp.content import cap_text, raw_content, result_text

logger = logging.getLogger(__name__)

# Largest arguments sent to a server for one call (as UTF-8 JSON).
MAX_ARGUMENT_BYTES = 1024 * 1024


@dataclass
class ToolResult:
    """What a tool call produced: ``text`` goes back to the model, ``content`` is the raw MCP
    content (for API items such as Responses' ``mcp_call``)."""

    text: str
    is_error: bool
    content: list[dict[str, Any]] = field(default_factory=list)
    server: str | None = None
    tool: str | None = None
    truncated: bool = False


def error_result(message: str, *, server: str | None = None, tool: str | None = None) -> ToolResult:
    return ToolResult(
        text=f"Error: {message}",
        is_error=True,
        content=[{"type": "text", "text": message}],
        server=server,
        tool=tool,
    )


def parse_arguments(arguments: dict[str, Any] | str | None) -> dict[str, Any]:
    """Accept arguments as a dict or the model's JSON text; raise ValueError when neither."""
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise ValueError(f"arguments are not valid JSON: {exc.msg}") from None
    if not isinstance(arguments, dict):
        raise ValueError("arguments must be a JSON object")
    return arguments


def sending_error(arguments: dict[str, Any]) -> str | None:
    """Why these arguments cannot go over the wire (not JSON, not UTF-8 — a lone surrogate —
    or too large), checked before the call so a bad one fails alone, not the session."""
    try:
        data = json.dumps(arguments, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:  # UnicodeEncodeError is a ValueError
        return f"arguments cannot be sent to the tool server: {exc}"
    if len(data) > MAX_ARGUMENT_BYTES:
        return f"arguments are {len(data)} bytes, over the {MAX_ARGUMENT_BYTES}-byte limit"
    return None


def schema_error(arguments: dict[str, Any], schema: dict[str, Any]) -> str | None:
    """The first way the arguments break the tool's input schema, or None."""
    try:
        validator_cls = jsonschema.validators.validator_for(schema)
        validator_cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        logger.warning("tool input schema is invalid, arguments not checked: %s", exc.message)
        return None
    error = jsonschema.exceptions.best_match(validator_cls(schema).iter_errors(arguments))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"invalid arguments{f' at {where}' if where else ''}: {error.message}"


async def execute(
    entry: CatalogEntry,
    connection: ServerConnection,
    arguments: dict[str, Any] | str | None,
    *,
    timeout: float,
    max_output_bytes: int,
    limiter: anyio.Semaphore,
) -> ToolResult:
    """Validate, call and convert; returns an error result for any failure."""
    server, tool = entry.server, entry.tool.name
    try:
        args = parse_arguments(arguments)
    except ValueError as exc:
        return error_result(str(exc), server=server, tool=tool)
    problem = sending_error(args) or schema_error(args, entry.input_schema)
    if problem:
        return error_result(problem, server=server, tool=tool)
    async with limiter:
        session = connection.session
        if session is None:
            reason = connection.last_error or connection.state
            return error_result(
                f"MCP server {server!r} is not connected ({reason})", server=server, tool=tool
            )
        try:
            with anyio.fail_after(timeout):
                result = await session.call_tool(tool, args)
        except TimeoutError:
            return error_result(
                f"tool {tool!r} timed out after {timeout:g}s", server=server, tool=tool
            )
        except MCPError as exc:
            if exc.error.code == types.CONNECTION_CLOSED:
                connection.mark_lost(str(exc))
                return error_result(
                    f"MCP server {server!r} closed the connection during the call "
                    "(it will be restarted)",
                    server=server,
                    tool=tool,
                )
            return error_result(f"tool {tool!r} failed: {exc}", server=server, tool=tool)
        except Exception as exc:  # the transport or session broke mid-call
            logger.warning("MCP call %s on %s failed: %s", tool, server, describe_error(exc))
            return error_result(
                f"tool {tool!r} failed: {describe_error(exc)}", server=server, tool=tool
            )
    text, truncated = cap_text(result_text(result), max_output_bytes)
    return ToolResult(
        text=text,
        is_error=bool(result.is_error),
        content=raw_content(result, max_output_bytes),
        server=server,
        tool=tool,
        truncated=truncated,
    )
