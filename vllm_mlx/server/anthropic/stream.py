"""The Anthropic Messages event stream.

``message_start``, then content blocks (``thinking``, ``text``, ``tool_use``) opened and closed
as the parsed deltas change kind, with tool input streamed as ``input_json_delta`` the moment
the parser releases it; then ``message_delta`` with the real stop reason and usage, and
``message_stop``. A failure ends the stream with an ``error`` event. ``ping`` events keep
clients whose watchdog counts events (Claude Code) waiting through a long prompt
(every ``--sse-keepalive`` seconds of silence).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from ...families.message import MessageDelta
from ...pipeline import ChatEvent, Usage
from ..errors import APIError
from ..ops.keepalive import ANTHROPIC_PING
from ..sse import sse_data
from ..streaming import event_frames
from .convert import stop_reason, tool_use_id, usage_body


def frame(body: dict) -> str:
    return sse_data(body, event=body["type"])


class MessageStream:
    """Turns pipeline events into Anthropic SSE frames, tracking the open content block."""

    def __init__(self, message_id: str, model: str, input_tokens: int):
        self.message_id = message_id
        self.model = model
        self.input_tokens = input_tokens
        self._next_index = 0
        self._open: tuple[str, int | None] | None = None  # (block type, tool-call index)

    def start(self) -> list[str]:
        message: dict[str, Any] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": 0},
        }
        return [frame({"type": "message_start", "message": message}), ANTHROPIC_PING]

    def frames(self, events: AsyncGenerator[ChatEvent, None]) -> AsyncIterator[str]:
        """All frames after ``start()``; raises on a failed generation (see ``error``)."""
        return event_frames(
            events, ANTHROPIC_PING, lambda event: self.delta(event.delta), self.finish
        )

    def delta(self, delta: MessageDelta) -> list[str]:
        out: list[str] = []
        if delta.reasoning_content:
            out += self._ensure_open("thinking", None, {"thinking": "", "signature": ""})
            out.append(self._delta({"type": "thinking_delta", "thinking": delta.reasoning_content}))
        if delta.content:
            out += self._ensure_open("text", None, {"text": ""})
            out.append(self._delta({"type": "text_delta", "text": delta.content}))
        for call in delta.tool_calls:
            if call.id is not None:
                start = {"id": tool_use_id(call.id), "name": call.name or "", "input": {}}
                out += self._ensure_open("tool_use", call.index, start)
            if call.arguments:
                out.append(
                    self._delta({"type": "input_json_delta", "partial_json": call.arguments})
                )
        return out

    def finish(self, event: ChatEvent) -> list[str]:
        out = self._close()
        reason, sequence = stop_reason(event.finish_reason, event.stop_reason)
        body = {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": sequence},
            "usage": usage_body(event.usage or Usage(self.input_tokens)),
        }
        if event.constraint_gave_up:
            body["constraint_gave_up"] = event.constraint_gave_up
        out.append(frame(body))
        out.append(frame({"type": "message_stop"}))
        return out

    @staticmethod
    def error(exc: Exception) -> list[str]:
        error = exc if isinstance(exc, APIError) else APIError(500, f"stream failed: {exc}")
        return [frame(error.anthropic_body())]

    def _ensure_open(self, kind: str, call: int | None, fields: dict) -> list[str]:
        if self._open == (kind, call):
            return []
        out = self._close()
        self._open = (kind, call)
        block = {"type": kind, **fields}
        index = self._next_index
        out.append(frame({"type": "content_block_start", "index": index, "content_block": block}))
        return out

    def _close(self) -> list[str]:
        if self._open is None:
            return []
        self._open = None
        self._next_index += 1
        return [frame({"type": "content_block_stop", "index": self._next_index - 1})]

    def _delta(self, delta: dict) -> str:
        return frame({"type": "content_block_delta", "index": self._next_index, "delta": delta})
