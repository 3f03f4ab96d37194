"""Pieces shared by the OpenAI chat and text completion endpoints: ids, usage, logprobs,
the streaming frame sequence, and running a request that stops if its client leaves."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import aclosing
from typing import TypeVar

from starlette.requests import Request

from ..engine.types import TokenLogprob
from ..pipeline import ChatEvent, ChatResult, Usage
from .errors import APIError
from .keepalive import OPENAI_KEEPALIVE, Idle, RequestTimeout
from .middleware import current_request
from .sse import sse_data

T = TypeVar("T")


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def usage_body(usage: Usage) -> dict:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def chat_logprobs(entries: list[TokenLogprob]) -> dict:
    return {
        "content": [
            {
                "token": e.token,
                "logprob": e.logprob,
                "bytes": e.bytes,
                "top_logprobs": [vars(t) for t in e.top_logprobs],
            }
            for e in entries
        ]
    }


def generation_failed(message: str | None) -> APIError:
    return APIError(500, f"generation failed: {message or 'unknown error'}")


def error_frames(exc: Exception, final_chunk: Callable[[str], dict]) -> list[str]:
    """An error frame, a terminal chunk with a finish_reason, then [DONE]."""
    error = exc if isinstance(exc, APIError) else APIError(500, f"stream failed: {exc}")
    return [sse_data(error.openai_body()), sse_data(final_chunk("error")), "data: [DONE]\n\n"]


async def event_frames(
    events: AsyncIterator[ChatEvent],
    idle_frame: str,
    on_event: Callable[[ChatEvent], Iterable[str]],
    on_finish: Callable[[ChatEvent], Iterable[str]],
) -> AsyncIterator[str]:
    """Every API's stream loop: ``on_event(event)`` for each event and ``on_finish`` after
    the final one, ``idle_frame`` while waiting, and a failed generation raised (so the
    stream's on_error frames end it).

    Through the request's context: keep-alives, metrics, deadline."""
    async with aclosing(current_request().watch(events)) as watched:
        async for event in watched:
            if isinstance(event, Idle):
                yield idle_frame
                continue
            if event.finish_reason == "error":
                raise generation_failed(event.error)
            for frame in on_event(event):
                yield frame
            if event.finish_reason is not None:
                for frame in on_finish(event):
                    yield frame
                return


def openai_frames(
    events: AsyncIterator[ChatEvent],
    chunk: Callable[[ChatEvent], dict | None],
    usage_chunk: Callable[[Usage], dict] | None,
) -> AsyncIterator[str]:
    """SSE frames for a stream of events; the last event's chunk carries finish_reason."""

    def on_event(event: ChatEvent) -> list[str]:
        body = chunk(event)
        return [sse_data(body)] if body is not None else []

    def on_finish(event: ChatEvent) -> list[str]:
        usage = [sse_data(usage_chunk(event.usage))] if usage_chunk and event.usage else []
        return [*usage, "data: [DONE]\n\n"]

    return event_frames(events, OPENAI_KEEPALIVE, on_event, on_finish)


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
