"""Waiting on a stream without going silent or waiting forever.

A long prompt can take minutes to prefill on a CPU before the first token. Proxies and
clients drop connections that stay silent that long, so a stream that is waiting sends a
keep-alive: an SSE comment on the OpenAI routes, an ``event: ping`` on Anthropic's. The same
wait also enforces the request's deadline (``--timeout``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import TypeVar, cast

from ..errors import APIError
from ..sse import sse_data

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
    source: AsyncGenerator[T, None],
    *,
    interval: float | None = None,
    deadline: float | None = None,
    timeout: float | None = None,
) -> AsyncGenerator[T | Idle, None]:
    """Items of ``source``, with ``IDLE`` after every ``interval`` seconds without one.

    ``deadline`` is an ``asyncio`` loop time; when it passes, ``source`` is closed (which
    cancels its generation) and ``RequestTimeout(timeout)`` is raised.

    One task reads ``source`` into a queue and two timers watch the clock, so an item costs a
    queue hand-off rather than a task and a timer of its own.
    """
    if interval is None and deadline is None:  # nothing to watch for
        async with aclosing(source) as items:
            async for item in items:
                yield item
        return
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[tuple[str, object]] = asyncio.Queue()
    last = loop.time()  # of the latest item or IDLE

    async def pump() -> None:
        nonlocal last
        try:
            async for item in source:
                last = loop.time()
                inbox.put_nowait(("item", item))
            inbox.put_nowait(("end", None))
        except Exception as exc:  # handed to the consumer, raised there
            inbox.put_nowait(("raise", exc))

    ticker: asyncio.TimerHandle | None = None

    def tick(every: float) -> None:
        nonlocal last, ticker
        now = loop.time()
        if now - last >= every * 0.999:
            inbox.put_nowait(("idle", None))
            last = now
        ticker = loop.call_at(last + every, tick, every)

    reader = asyncio.ensure_future(pump())
    if interval:
        ticker = loop.call_at(last + interval, tick, interval)
    expiry = None
    if deadline is not None:
        expiry = loop.call_at(deadline, inbox.put_nowait, ("timeout", None))
    try:
        while True:
            kind, value = await inbox.get()
            if kind == "item":
                yield cast(T, value)
            elif kind == "idle":
                yield IDLE
            elif kind == "end":
                return
            elif kind == "raise":
                raise cast(BaseException, value)
            else:
                raise RequestTimeout(timeout or 0)
    finally:
        for handle in (ticker, expiry):
            if handle is not None:
                handle.cancel()
        reader.cancel()  # cancels the source where it waits, which cancels its generation
        try:
            await reader
        except asyncio.CancelledError:
            pass
        await source.aclose()
