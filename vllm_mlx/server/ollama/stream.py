"""Ollama's NDJSON replies: one JSON object a line, ``done: false`` pieces, then the
``done: true`` line with ``done_reason`` and the counters (nanoseconds and token counts).

The non-streamed body is the streamed pieces folded into one, as Ollama builds it, so the
two agree by construction. A tool call is sent whole, arguments as an object, once the next
call starts or the turn ends. A failure mid-stream ends it with ``{"error": "..."}`` (the
line Ollama's clients raise as ``ResponseError``).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Literal

from starlette.responses import StreamingResponse

from ...engine.generation import TokenLogprob
from ...families.message import MessageDelta
from ...pipeline import ChatEvent, Usage
from ..errors import api_error
from ..sse import guarded_response
from ..streaming import event_frames
from .convert import done_reason, tool_call_body

NDJSON = "application/x-ndjson"


def ndjson(body: dict) -> str:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")) + "\n"


def created_at() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def ndjson_response(
    lines: AsyncIterator[str], on_error: Callable[[Exception], list[str]]
) -> StreamingResponse:
    """Stream ``lines``; if they raise, end with ``on_error(exc)`` (the error line)."""
    return guarded_response(lines, on_error, NDJSON)


def error_lines(exc: Exception) -> list[str]:
    return [ndjson(api_error(exc).ollama_body())]


@dataclass
class Timer:
    """The request's clock for Ollama's counters (``time.perf_counter_ns``)."""

    started: int = field(default_factory=time.perf_counter_ns)
    loaded: int = 0  # the model's lease held (a load, if one was needed, done)
    first: int | None = None  # the first output (the prompt evaluated)

    def mark_loaded(self) -> None:
        self.loaded = time.perf_counter_ns()

    def counters(self, usage: Usage | None) -> dict:
        ended = time.perf_counter_ns()
        first = self.first or ended
        usage = usage or Usage()
        return {
            "total_duration": ended - self.started,
            "load_duration": self.loaded - self.started,
            "prompt_eval_count": usage.prompt_tokens,
            "prompt_eval_duration": first - self.loaded,
            "eval_count": usage.completion_tokens,
            "eval_duration": ended - first,
        }


def logprobs_body(entries: list[TokenLogprob]) -> list[dict]:
    return [
        {
            "token": e.token,
            "logprob": e.logprob,
            "bytes": e.bytes,
            "top_logprobs": [vars(t) for t in e.top_logprobs],
        }
        for e in entries
    ]


Kind = Literal["chat", "generate"]


class Reply:
    """Pipeline events as Ollama pieces: ``message`` objects (/api/chat) or ``response``
    text (/api/generate)."""

    def __init__(self, model: str, kind: Kind, timer: Timer, logprobs: bool = False):
        self.model = model
        self.kind = kind
        self.timer = timer
        self.logprobs = logprobs
        self.sent: list[dict] = []  # every piece, for the non-streamed body
        self._calls: dict[int, list[str]] = {}  # index -> [id, name, arguments so far]
        self._done_calls: set[int] = set()

    def piece(self, content: str = "", thinking: str = "", calls: list | None = None) -> dict:
        body: dict = {"model": self.model, "created_at": created_at()}
        body = self._filled(body, content, thinking, calls or [])
        body["done"] = False
        return body

    def _filled(self, body: dict, content: str, thinking: str, calls: list) -> dict:
        """``body`` with the text, thinking and calls where the kind keeps them: a chat
        ``message``, or a generate body's own ``response`` and ``thinking`` (no calls)."""
        if self.kind == "chat":
            message: dict = {"role": "assistant", "content": content}
            if thinking:
                message["thinking"] = thinking
            if calls:
                message["tool_calls"] = calls
            body["message"] = message
        else:
            body["response"] = content
            if thinking:
                body["thinking"] = thinking
        return body

    async def lines(self, events: AsyncGenerator[ChatEvent, None]) -> AsyncIterator[str]:
        """The whole stream; raises on a failed generation (see ``error_lines``). While the
        prompt is evaluated past ``--sse-keepalive``, empty pieces keep the connection."""
        idle = ndjson(self.piece())
        async for line in event_frames(events, idle, self._on_event, self._on_finish):
            yield line

    def _on_event(self, event: ChatEvent) -> list[str]:
        if self.timer.first is None:
            self.timer.first = time.perf_counter_ns()
        calls = self._calls_done(event.delta, final=event.finish_reason is not None)
        delta = event.delta
        if not (delta.content or delta.reasoning_content or calls or event.logprobs):
            return []
        body = self.piece(delta.content, delta.reasoning_content, calls)
        if self.logprobs and event.logprobs:
            body["logprobs"] = logprobs_body(event.logprobs)
        return [self._send(body)]

    def _on_finish(self, event: ChatEvent) -> list[str]:
        body = self.piece()
        body["done"] = True
        body["done_reason"] = done_reason(event.finish_reason)
        body.update(self.timer.counters(event.usage))
        if event.constraint_gave_up:
            body["constraint_gave_up"] = event.constraint_gave_up
        return [self._send(body)]

    def _send(self, body: dict) -> str:
        self.sent.append(body)
        return ndjson(body)

    def _calls_done(self, delta: MessageDelta, final: bool) -> list[dict]:
        """The calls complete after ``delta``: those a later call follows, all at the end."""
        for piece in delta.tool_calls:
            call = self._calls.setdefault(piece.index, ["", "", ""])
            call[0] = piece.id or call[0]
            call[1] = piece.name or call[1]
            call[2] += piece.arguments
        last = max(self._calls, default=-1)
        ready = [
            i for i in sorted(self._calls) if i not in self._done_calls and (final or i < last)
        ]
        self._done_calls.update(ready)
        return [tool_call_body(i, *self._calls[i]) for i in ready]

    def collected(self) -> dict:
        """The non-streamed body: every piece folded into the final one."""
        pieces = self.sent
        parts = [p["message"] for p in pieces] if self.kind == "chat" else pieces
        text = "content" if self.kind == "chat" else "response"
        final = self._filled(
            dict(pieces[-1]),
            "".join(p[text] for p in parts),
            "".join(p.get("thinking", "") for p in parts),
            [c for p in parts for c in p.get("tool_calls", [])],
        )
        logprobs = [lp for p in pieces for lp in p.get("logprobs", [])]
        if logprobs:
            final["logprobs"] = logprobs
        return final

    async def collect(self, events: AsyncGenerator[ChatEvent, None]) -> dict:
        async for _ in self.lines(events):
            pass
        return self.collected()
