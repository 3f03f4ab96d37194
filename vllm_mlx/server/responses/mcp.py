"""MCP tools on /v1/responses: ``{"type": "mcp", "server_label": ...}`` tools run here.

A request's ``mcp`` tools name servers from ``--mcp-config`` (the server never connects to a
URL the client sends). The model sees the client's function tools plus those servers'
(allowed) tools; ``run_tool_loop`` executes its MCP calls and generates again until it
answers, calls a client tool, or spends ``max_tool_calls``. The output holds one
``mcp_list_tools`` item per server, one ``mcp_call`` item per executed call, then the final
turn's items. Streams send each MCP item's events as it starts and finishes; every turn is
generated whole, so the final turn's text arrives as one delta.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ...mcp.catalog import CatalogEntry
from ...mcp.executor import ToolResult
from ...pipeline import ChatResult, Prepared
from ...request import ChatRequest
from ..errors import APIError
from ..mcp.tool_loop import ToolLoopRun, call_budget
from ..ops.keepalive import OPENAI_KEEPALIVE, Idle, paced
from ..ops.middleware import current_request
from ..state import ServerState
from ..streaming import whole_delta
from .convert import new_item_id, status_of
from .stream import ResponseStream

Send = Callable[[str], None]


@dataclass
class ServerTools:
    """One ``mcp`` tool of the request: a configured server and the tools it may use."""

    label: str
    entries: list[CatalogEntry]
    error: str | None = None  # why the server has no tools right now

    def list_item(self) -> dict[str, Any]:
        tools = [
            {
                "name": e.tool.name,
                "description": e.tool.description or "",
                "input_schema": e.input_schema,
                "annotations": _annotations(e),
            }
            for e in self.entries
        ]
        return {
            "id": new_item_id("mcpl"),
            "type": "mcp_list_tools",
            "server_label": self.label,
            "tools": tools,
            "error": self.error,
        }


@dataclass
class MCPSelection:
    servers: list[ServerTools]
    entries: dict[str, CatalogEntry] = field(init=False)  # by the name the model sees

    def __post_init__(self) -> None:
        self.entries = {e.exposed_name: e for s in self.servers for e in s.entries}

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The tools the model sees, in chat form."""
        return [e.to_openai() for e in self.entries.values()]

    def tool_choice(self, choice: Any) -> Any:
        """An ``mcp`` tool_choice naming a server's tool, as the name the model sees."""
        if not isinstance(choice, dict) or choice.get("type") != "mcp" or not choice.get("name"):
            return choice
        for entry in self.entries.values():
            if entry.server == choice.get("server_label") and entry.tool.name == choice["name"]:
                return {"type": "function", "name": entry.exposed_name}
        raise APIError(
            400,
            f"tool_choice names {choice['name']!r}, which server "
            f"{choice.get('server_label')!r} does not offer to this request",
            param="tool_choice",
        )


def select_mcp_tools(tools: list[dict] | None, manager: Any) -> MCPSelection | None:
    """The request's ``mcp`` tools resolved against the configured servers; None without
    any. Every problem is a 400 naming the tool, before anything runs."""
    specs = [(i, t) for i, t in enumerate(tools or []) if t.get("type") == "mcp"]
    if not specs:
        return None
    if manager is None:
        raise APIError(
            400,
            "mcp tools need MCP servers; start the server with --mcp-config FILE",
            param=f"tools.{specs[0][0]}",
        )
    configured = manager.status()
    servers: list[ServerTools] = []
    for i, spec in specs:
        label = spec.get("server_label")
        if not isinstance(label, str) or not label:
            raise APIError(400, "mcp tools need a server_label", param=f"tools.{i}.server_label")
        if label not in configured:
            known = ", ".join(sorted(configured)) or "none"
            raise APIError(
                400,
                f"unknown MCP server_label {label!r}; configured servers: {known}",
                param=f"tools.{i}.server_label",
            )
        if any(s.label == label for s in servers):
            raise APIError(
                400, f"server_label {label!r} is listed twice", param=f"tools.{i}.server_label"
            )
        for key in ("server_url", "connector_id"):
            if spec.get(key):
                raise APIError(
                    400,
                    f"{key} is not supported: this server only runs the MCP servers of its "
                    "--mcp-config, named by server_label",
                    param=f"tools.{i}.{key}",
                )
        approval = spec.get("require_approval")
        if approval not in (None, "never"):
            raise APIError(
                400,
                'approvals are not supported; use "require_approval": "never"',
                param=f"tools.{i}.require_approval",
            )
        allowed = _allowed(spec.get("allowed_tools"), f"tools.{i}.allowed_tools")
        entries = [
            e
            for e in manager.catalog.entries.values()
            if e.server == label and _permits(allowed, e)
        ]
        status = configured[label]
        error = None if status["state"] == "connected" else _unavailable(status)
        servers.append(ServerTools(label, entries, error))
    return MCPSelection(servers)


def _allowed(value: Any, param: str) -> tuple[set[str] | None, bool]:
    """``allowed_tools`` as (names or None, read_only): a list, or a filter object."""
    if value is None:
        return None, False
    if isinstance(value, list) and all(isinstance(n, str) for n in value):
        return set(value), False
    if isinstance(value, dict):
        names = value.get("tool_names")
        if names is not None and not (
            isinstance(names, list) and all(isinstance(n, str) for n in names)
        ):
            raise APIError(400, "tool_names must be a list of names", param=f"{param}.tool_names")
        return (set(names) if names is not None else None), bool(value.get("read_only"))
    raise APIError(400, "allowed_tools must be a list of tool names or a filter", param=param)


def _permits(allowed: tuple[set[str] | None, bool], entry: CatalogEntry) -> bool:
    names, read_only = allowed
    if names is not None and not {entry.tool.name, entry.exposed_name} & names:
        return False
    return not read_only or _annotations(entry).get("read_only_hint") is True


def _annotations(entry: CatalogEntry) -> dict[str, Any]:
    notes = entry.tool.annotations
    return notes.model_dump(exclude_none=True) if notes is not None else {}


def _unavailable(status: dict[str, Any]) -> str:
    reason = f": {status['last_error']}" if status.get("last_error") else ""
    return f"server is {status['state']}{reason}"


class MCPResponseRun:
    """One request's tool loop (``server/mcp/tool_loop.py``) rendered as Responses items
    into ``stream`` (whose frames go to ``send``; a non-streamed request discards them and
    returns ``stream.final``)."""

    def __init__(
        self,
        state: ServerState,
        chat: ChatRequest,
        prepared: Prepared,
        selection: MCPSelection,
        stream: ResponseStream,
        max_tool_calls: int | None,
    ):
        self.selection = selection
        self.stream = stream
        self.loop = ToolLoopRun(
            state.pipeline,
            chat,
            prepared,
            _ObservedCalls(state.mcp, self),
            budget=call_budget(state.mcp, max_tool_calls),
            allowed_tools=set(selection.entries),
        )
        self.result: ChatResult | None = None  # all turns as one, once finished
        self.send: Send = lambda frame: None

    async def run(self, send: Send | None = None) -> ChatResult:
        """Run the loop to the terminal event (``stream.final`` holds the response); returns
        the turns' result as one (usage summed) for the metrics."""
        if send is not None:
            self.send = send
        for server in self.selection.servers:
            self._list_tools(server)
        result = await self.loop.run()
        self._emit(self.stream.delta(whole_delta(result.message)))
        if result.finish_reason == "tool_calls":
            status, details = "completed", None
        elif self.loop.loop is not None and self.loop.loop.cut_off:
            status, details = "incomplete", {"reason": "max_tool_calls"}
        else:
            status, details = status_of(result.finish_reason)
        self._emit(
            self.stream.finish_with(status, details, result.usage, result.constraint_gave_up)
        )
        self.result = result
        return result

    # -- items -----------------------------------------------------------------------------

    def _emit(self, frames: list[str]) -> None:
        for frame in frames:
            self.send(frame)

    def _list_tools(self, server: ServerTools) -> None:
        item = server.list_item()
        index = len(self.stream.output)
        ids = {"item_id": item["id"], "output_index": index}
        added = {**item, "tools": []}
        phase = "failed" if item["error"] else "completed"
        self._emit(
            [
                self.stream.event("response.output_item.added", output_index=index, item=added),
                self.stream.event("response.mcp_list_tools.in_progress", **ids),
                self.stream.event(f"response.mcp_list_tools.{phase}", **ids),
                self.stream.event("response.output_item.done", output_index=index, item=item),
            ]
        )
        self.stream.output.append(item)

    def call_started(self, name: str, arguments: str) -> int:
        """Add the ``mcp_call`` item (in progress); returns its output index."""
        entry = self.selection.entries[name]
        item = {
            "id": new_item_id("mcp"),
            "type": "mcp_call",
            "status": "in_progress",
            "server_label": entry.server,
            "name": entry.tool.name,
            "arguments": "",
            "output": None,
            "error": None,
        }
        index = len(self.stream.output)
        self.stream.output.append({**item, "arguments": arguments})
        ids = {"item_id": item["id"], "output_index": index}
        self._emit(
            [
                self.stream.event("response.output_item.added", output_index=index, item=item),
                self.stream.event("response.mcp_call.in_progress", **ids),
                self.stream.event("response.mcp_call_arguments.delta", delta=arguments, **ids),
                self.stream.event("response.mcp_call_arguments.done", arguments=arguments, **ids),
            ]
        )
        return index

    def call_finished(self, index: int, result: ToolResult) -> None:
        item = dict(self.stream.output[index])
        if result.is_error:
            text = [{"type": "text", "text": result.text}]
            item.update(
                status="failed", error={"type": "mcp_tool_execution_error", "content": text}
            )
        else:
            item.update(status="completed", output=result.text)
        self.stream.output[index] = item
        ids = {"item_id": item["id"], "output_index": index}
        phase = "failed" if result.is_error else "completed"
        self._emit(
            [
                self.stream.event(f"response.mcp_call.{phase}", **ids),
                self.stream.event("response.output_item.done", output_index=index, item=item),
            ]
        )


class _ObservedCalls:
    """The manager as the loop's ``ToolRunner``, reporting each call as it starts and ends.

    The loop starts a round's calls in order before any awaits, so output indices follow the
    model's call order even when the calls finish in another.
    """

    def __init__(self, manager: Any, run: MCPResponseRun):
        self.manager = manager
        self.run = run

    def is_mcp_tool(self, name: str) -> bool:
        return self.manager.is_mcp_tool(name)

    def server_of(self, name: str) -> str | None:
        return self.manager.server_of(name)

    async def call_tool(self, name: str, arguments: dict[str, Any] | str | None) -> ToolResult:
        text = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
        index = self.run.call_started(name, text)
        result = await self.manager.call_tool(name, arguments)
        self.run.call_finished(index, result)
        return result


async def stream_frames(run: MCPResponseRun) -> AsyncIterator[str]:
    """The whole SSE stream of ``run``, with keep-alives while a turn or a call is running
    and the request's deadline enforced (which cancels the loop)."""
    for frame in run.stream.start():
        yield frame
    context = current_request()
    frames = paced(
        _frames_of(run.run),
        interval=context.keepalive,
        deadline=context.deadline,
        timeout=context.timeout,
    )
    async for frame in frames:
        yield OPENAI_KEEPALIVE if isinstance(frame, Idle) else frame
    if run.result is not None:
        context.observe_result(run.result)


async def _frames_of(work: Callable[[Send], Awaitable[ChatResult]]) -> AsyncIterator[str]:
    """The frames ``work`` sends while it runs; its error is raised after them, and closing
    this iterator (client gone, deadline) cancels it."""
    queue: asyncio.Queue[str | None] = asyncio.Queue()
    task = asyncio.ensure_future(work(queue.put_nowait))
    task.add_done_callback(lambda _: queue.put_nowait(None))
    try:
        while (frame := await queue.get()) is not None:
            yield frame
        task.result()
    finally:
        task.cancel()
