"""Server-sent events that always end properly.

A stream's producer may fail midway; the client must still see an error frame and the
protocol's terminal event rather than a connection that just stops.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

from starlette.responses import StreamingResponse

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse_data(obj: dict | str, event: str | None = None) -> str:
    data = (
        obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    )
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {data}\n\n"


def sse_response(
    frames: AsyncIterator[str], on_error: Callable[[Exception], list[str]]
) -> StreamingResponse:
    """Stream ``frames``; if they raise, send ``on_error(exc)`` (error + terminal frames)."""

    async def guarded() -> AsyncIterator[str]:
        try:
            async for frame in frames:
                yield frame
        except Exception as exc:  # the stream must end with its terminal event regardless
            for frame in on_error(exc):
                yield frame

    return StreamingResponse(guarded(), media_type="text/event-stream", headers=SSE_HEADERS)
