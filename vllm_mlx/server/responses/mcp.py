"""MCP tools on /v1/responses, rendered: the one server-side loop
(``server/mcp/tool_loop.py``) as Responses items and events. Which tools a request may use is
``mcp_tools.py``.

The model sees the client's function tools plus the selected servers' (allowed) tools; the
loop executes its MCP calls and generates again until it answers, calls a client tool, or
spends ``max_tool_calls``. The output holds one
``mcp_list_tools`` item per server, one ``mcp_call`` item per executed call, then the final
turn's items. Streams send each MCP item's events as it starts and finishes; every turn is
generated whole, so the final turn's text arrives as one delta.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from ...mcp.executor import ToolResult
from ...pipeline import ChatResult, Pipeline, Prepared
from ...request import ChatRequest
from ..mcp.tool_loop import ToolLoopRun, call_budget
from ..ops.keepalive import OPENAI_KEEPALIVE, Idle, paced
from ..ops.middleware import current_request
from ..state import ServerState
from ..streaming import whole_delta
from .convert import new_item_id, status_of
from .mcp_tools import MCPSelection, ServerTools
from .stream import ResponseStream

Send = Callable[[str], None]


class MCPResponseRun:
    """One request's tool loop (``server/mcp/tool_loop.py``) rendered as Responses items
    into ``stream`` (whose frames go to ``send``; a non-streamed request discards them and
    returns ``stream.final``)."""

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
        elif self.loop.cut_off:
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
    async for item in frames:
        yield OPENAI_KEEPALIVE if isinstance(item, Idle) else item
    if run.result is not None:
        context.observe_result(run.result)


async def _frames_of(
    work: Callable[[Send], Awaitable[ChatResult]],
) -> AsyncGenerator[str, None]:
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
