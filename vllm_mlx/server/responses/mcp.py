"""MCP tools on /v1/responses, rendered: the one server-side loop
(``server/mcp/tool_loop.py``) as Responses items and events. Which tools a request may use is
``mcp_tools.py``.

The model sees the client's function tools plus the selected servers' (allowed) tools; the
loop executes its MCP calls and generates again until it answers, calls a client tool, or
spends ``max_tool_calls``. The output holds one ``mcp_list_tools`` item per server, then, in
the order they happened, each turn's items as the model writes them (reasoning, message, the
client's calls) and one ``mcp_call`` item per executed call. The loop's events go through
the stream loop every stream uses (``streaming.event_frames``); a non-streamed request runs
the same frames and answers ``stream.final``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from ...mcp.executor import ToolResult
from ...mcp.loop import CallStarted
from ...pipeline import ChatEvent, Pipeline, Prepared
from ...request import ChatRequest
from ..mcp.tool_loop import ToolLoopRun, call_budget
from ..ops.keepalive import OPENAI_KEEPALIVE
from ..state import ServerState
from ..streaming import ToolCallEvent, event_frames
from .convert import new_item_id, status_of
from .mcp_tools import MCPSelection, ServerTools
from .stream import ResponseStream


class MCPResponseRun:
    """One request's tool loop (``server/mcp/tool_loop.py``) rendered as Responses items
    into ``stream``."""

    def __init__(
        self,
        state: ServerState,
        pipeline: Pipeline,
        chat: ChatRequest,
        prepared: Prepared,
        selection: MCPSelection,
        stream: ResponseStream,
        max_tool_calls: int | None,
    ):
        self.selection = selection
        self.stream = stream
        self.loop = ToolLoopRun(
            pipeline,
            chat,
            prepared,
            state.mcp,
            budget=call_budget(state.mcp, max_tool_calls),
            allowed_tools=set(selection.entries),
        )
        self._running: dict[str, list[int]] = {}  # a call id -> output indices, started first

    async def frames(self) -> AsyncIterator[str]:
        """Every frame after ``stream.start()``, to the terminal event (``stream.final``
        holds the response); a failure is raised (``stream.failed`` renders it)."""
        for server in self.selection.servers:
            for frame in self._list_tools(server):
                yield frame
        events = self.loop.events()
        frames = event_frames(
            events, OPENAI_KEEPALIVE, self._delta, self._finish, on_call=self._call
        )
        async for frame in frames:
            yield frame

    def _delta(self, event: ChatEvent) -> list[str]:
        return self.stream.delta(event.delta)

    def _finish(self, event: ChatEvent) -> list[str]:
        if event.finish_reason == "tool_calls":
            status, details = "completed", None
        elif self.loop.cut_off:
            status, details = "incomplete", {"reason": "max_tool_calls"}
        else:
            status, details = status_of(event.finish_reason or "error")
        return self.stream.finish_with(status, details, event.usage, event.constraint_gave_up)

    def _call(self, event: ToolCallEvent) -> list[str]:
        if isinstance(event, CallStarted):
            call = event.call
            index, frames = self._call_started(call.name, call.arguments)
            self._running.setdefault(call.id, []).append(index)
            return frames
        return self._call_finished(self._running[event.call.id].pop(0), event.call.result)

    # -- items -----------------------------------------------------------------------------

    def _list_tools(self, server: ServerTools) -> list[str]:
        item = server.list_item()
        index = len(self.stream.output)
        ids = {"item_id": item["id"], "output_index": index}
        added = {**item, "tools": []}
        phase = "failed" if item["error"] else "completed"
        self.stream.output.append(item)
        return [
            self.stream.event("response.output_item.added", output_index=index, item=added),
            self.stream.event("response.mcp_list_tools.in_progress", **ids),
            self.stream.event(f"response.mcp_list_tools.{phase}", **ids),
            self.stream.event("response.output_item.done", output_index=index, item=item),
        ]

    def _call_started(self, name: str, arguments: str) -> tuple[int, list[str]]:
        """Add the ``mcp_call`` item (in progress) after the turn's open item; returns its
        output index and frames."""
        frames = self.stream.close_item()
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
        return index, [
            *frames,
            self.stream.event("response.output_item.added", output_index=index, item=item),
            self.stream.event("response.mcp_call.in_progress", **ids),
            self.stream.event("response.mcp_call_arguments.delta", delta=arguments, **ids),
            self.stream.event("response.mcp_call_arguments.done", arguments=arguments, **ids),
        ]

    def _call_finished(self, index: int, result: ToolResult) -> list[str]:
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
        return [
            self.stream.event(f"response.mcp_call.{phase}", **ids),
            self.stream.event("response.output_item.done", output_index=index, item=item),
        ]
