"""The Anthropic Messages event stream.

``message_start`` (sent with the first event, when the prompt's cached split is known, or
with the first ping if prefill outlasts ``--sse-keepalive``), then content blocks
(``thinking``, ``text``, ``tool_use``) opened and closed as the parsed deltas change kind,
with tool input streamed as ``input_json_delta`` the moment the parser releases it; then
``message_delta`` with the real stop reason and the same input split as ``message_start``,
and ``message_stop``. A failure ends the stream with an ``error`` event. ``ping`` events
keep clients whose watchdog counts events (Claude Code) waiting through a long prompt
(every ``--sse-keepalive`` seconds of silence).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from ...families.message import MessageDelta
from ...pipeline import ChatEvent, Usage
from ..errors import api_error
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
        # the input split message_start announced; message_delta repeats it (Anthropic's
        # usage agrees within a stream)
        self._input: Usage | None = None

    def _start(self, usage: Usage | None) -> list[str]:
        if self._input is not None:
            return []
        self._input = usage or Usage(self.input_tokens)
        message: dict[str, Any] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage_body(Usage(self._input.prompt_tokens, 0, self._input.cached_tokens)),
        }
        return [frame({"type": "message_start", "message": message}), ANTHROPIC_PING]

    async def frames(self, events: AsyncGenerator[ChatEvent, None]) -> AsyncIterator[str]:
        """The whole stream; raises on a failed generation (see ``error``)."""

        def on_event(event: ChatEvent) -> list[str]:
            return self._start(event.usage) + self.delta(event.delta)

        async for out in event_frames(events, ANTHROPIC_PING, on_event, self.finish):
            if out == ANTHROPIC_PING and self._input is None:
                out = "".join(self._start(None))  # message_start, then its ping
            yield out

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
        announced = self._input or Usage(self.input_tokens)
        completion = event.usage.completion_tokens if event.usage else 0
        usage = Usage(announced.prompt_tokens, completion, announced.cached_tokens)
        body = {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": sequence},
            "usage": usage_body(usage),
        }
        if event.constraint_gave_up:
            body["constraint_gave_up"] = event.constraint_gave_up
        out.append(frame(body))
        out.append(frame({"type": "message_stop"}))
        return out

    @staticmethod
    def error(exc: Exception) -> list[str]:
        error = api_error(exc)
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
