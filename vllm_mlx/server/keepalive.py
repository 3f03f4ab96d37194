"""Waiting on a stream without going silent or waiting forever.

A long prompt can take minutes to prefill on a CPU before the first token. Proxies and
clients drop connections that stay silent that long, so a stream that is waiting sends a
keep-alive: an SSE comment on the OpenAI routes, an ``event: ping`` on Anthropic's. The same
wait also enforces the request's deadline (``--timeout``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TypeVar

from .errors import APIError
from .sse import sse_data

T = TypeVar("T")

OPENAI_KEEPALIVE = ": keep-alive\n\n"
ANTHROPIC_PING = sse_data({"type": "ping"}, event="ping")


class Idle:
    """Yielded by ``paced`` each time ``interval`` seconds pass with no item."""

    def __repr__(self) -> str:
        return "IDLE"


IDLE = Idle()


class RequestTimeout(APIError):
    def __init__(self, seconds: float):
        super().__init__(504, f"request timed out after {seconds:g} s", code="timeout")


async def paced(
    source: AsyncIterator[T],
    *,
    interval: float | None = None,
    deadline: float | None = None,
    timeout: float | None = None,
) -> AsyncIterator[T | Idle]:
    """Items of ``source``, with ``IDLE`` after every ``interval`` seconds without one.

    ``deadline`` is an ``asyncio`` loop time; when it passes, ``source`` is closed (which
    cancels its generation) and ``RequestTimeout(timeout)`` is raised.
    """
    loop = asyncio.get_running_loop()
    pending: asyncio.Future | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(source))
            left = None if deadline is None else deadline - loop.time()
            wait = min((w for w in (interval, left) if w is not None), default=None)
            if wait is not None and wait <= 0:
                raise RequestTimeout(timeout or 0)
            done, _ = await asyncio.wait({pending}, timeout=wait)
            if not done:
                if deadline is not None and loop.time() >= deadline:
                    raise RequestTimeout(timeout or 0)
                yield IDLE
                continue
            try:
                item = pending.result()
            except StopAsyncIteration:
                return
            pending = None
            yield item
    finally:
        if pending is not None and not pending.done():
            pending.cancel()
            try:
                await pending
            except (asyncio.CancelledError, StopAsyncIteration):
                pass
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            await aclose()
