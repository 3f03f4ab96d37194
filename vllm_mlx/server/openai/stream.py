"""The OpenAI-shaped pieces both OpenAI endpoints share: ids, usage, logprobs, and the SSE
frame sequence (chunks, an optional usage chunk, ``[DONE]``; an error frame on failure)."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable

from ...engine.generation import TokenLogprob
from ...pipeline import ChatEvent, Usage
from ..errors import api_error
from ..ops.keepalive import OPENAI_KEEPALIVE
from ..sse import sse_data
from ..streaming import ToolCallEvent, event_frames

DONE = "data: [DONE]\n\n"


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


def error_frames(exc: Exception, final_chunk: Callable[[str], dict]) -> list[str]:
    """An error frame, a terminal chunk with a finish_reason, then [DONE]."""
    error = api_error(exc)
    return [sse_data(error.openai_body()), sse_data(final_chunk("error")), DONE]


def openai_frames(
    events: AsyncGenerator[ChatEvent | ToolCallEvent, None],
    chunk: Callable[[ChatEvent], dict | None],
    usage_chunk: Callable[[Usage], dict] | None,
) -> AsyncIterator[str]:
    """SSE frames for a stream of events (a generation's or a tool loop's, whose MCP calls
    are reported on the finishing chunk); the last event's chunk carries finish_reason."""

    def on_event(event: ChatEvent) -> list[str]:
        body = chunk(event)
        return [sse_data(body)] if body is not None else []

    def on_finish(event: ChatEvent) -> list[str]:
        usage = [sse_data(usage_chunk(event.usage))] if usage_chunk and event.usage else []
        return [*usage, DONE]

    return event_frames(events, OPENAI_KEEPALIVE, on_event, on_finish)
