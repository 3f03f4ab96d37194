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
    """One frame. It can always be encoded: should a value hold a lone surrogate (request
    validation refuses them, so only a bug would echo one) the frame falls back to ASCII
    escapes rather than failing mid-stream without the terminal event."""
    if isinstance(obj, str):
        data = obj.encode("utf-8", "backslashreplace").decode("utf-8")
    else:
        data = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
        if not _encodable(data):
            data = json.dumps(obj, ensure_ascii=True, separators=(",", ":"))
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {data}\n\n"


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def guarded_response(
    chunks: AsyncIterator[str],
    on_error: Callable[[Exception], list[str]],
    media_type: str,
    headers: dict[str, str] | None = None,
) -> StreamingResponse:
    """Stream ``chunks``; if they raise, send ``on_error(exc)``: whatever fails, the
    stream ends with the protocol's error and terminal chunks."""

    async def guarded() -> AsyncIterator[str]:
        try:
            async for chunk in chunks:
                yield chunk
        except Exception as exc:  # the stream must end with its terminal event regardless
            for chunk in on_error(exc):
                yield chunk

    return StreamingResponse(guarded(), media_type=media_type, headers=headers)


def sse_response(
    frames: AsyncIterator[str], on_error: Callable[[Exception], list[str]]
) -> StreamingResponse:
    """Stream ``frames``; if they raise, send ``on_error(exc)`` (error + terminal frames)."""
    return guarded_response(frames, on_error, "text/event-stream", SSE_HEADERS)
