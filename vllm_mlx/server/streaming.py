"""What every surface's handler shares: the stream loop over pipeline events, a request
that stops when its client leaves, and a failed generation as an error.

Through the request's context (``ops.middleware.current_request``): keep-alives, metrics,
the deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable
from contextlib import aclosing
from typing import TypeVar

from starlette.requests import Request

from ..engine.generation import GenerationError
from ..mcp.loop import CallFinished, CallStarted
from ..pipeline import ChatEvent, ChatResult
from .errors import APIError, api_error
from .ops.keepalive import Idle, RequestTimeout
from .ops.middleware import current_request

T = TypeVar("T")
ToolCallEvent = CallStarted | CallFinished  # a tool loop's own events (mcp/loop.py)


def generation_failed(error: GenerationError | None) -> APIError:
    """A generation that ended with an error (or was cancelled, without one), by the
    error table: 500, 503 when the engine stopped serving."""
    return api_error(error or GenerationError("unknown error"))


async def event_frames(
    events: AsyncGenerator[ChatEvent | ToolCallEvent, None],
    idle_frame: str,
    on_event: Callable[[ChatEvent], Iterable[str]],
    on_finish: Callable[[ChatEvent], Iterable[str]],
    on_call: Callable[[ToolCallEvent], Iterable[str]] | None = None,
) -> AsyncIterator[str]:
    """Every API's stream loop, for a generation or a tool loop (``server/mcp/tool_loop``):
    ``on_event(event)`` for each event and ``on_finish`` after the final one, ``on_call``
    for each MCP call starting or finishing (skipped without it), ``idle_frame`` while
    waiting, and a failed generation raised (so the stream's on_error frames end it)."""
    async with aclosing(current_request().watch(events)) as watched:
        async for event in watched:
            if isinstance(event, Idle):
                yield idle_frame
                continue
            if isinstance(event, CallStarted | CallFinished):
                for frame in on_call(event) if on_call is not None else ():
                    yield frame
                continue
            if event.finish_reason == "error":
                raise generation_failed(event.error)
            for frame in on_event(event):
                yield frame
            if event.finish_reason is not None:
                for frame in on_finish(event):
                    yield frame
                return


async def unless_disconnected(request: Request, work: Awaitable[T], poll: float = 0.25) -> T:
    """Await ``work``, cancelling it (and so its generation) if the client goes away or the
    request's deadline passes; a ``ChatResult`` is counted in the metrics."""
    context = current_request()
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=poll)
            if done:
                result = task.result()
                if isinstance(result, ChatResult):
                    context.observe_result(result)
                return result
            if context.expired():
                raise RequestTimeout(context.timeout or 0)
            if await request.is_disconnected():
                task.cancel()
                raise APIError(499, "client disconnected")
    finally:
        if not task.done():
            task.cancel()
