"""The Responses event stream.

``response.created``, ``response.in_progress``; per output item ``output_item.added``,
its content part, its deltas (``reasoning_text``, ``output_text``, or
``function_call_arguments``, or a custom call's ``custom_tool_call_input``, as the parser
releases them) and their ``.done`` events, then
``output_item.done``; and exactly one terminal event: ``response.completed``,
``response.incomplete`` or ``response.failed``. Every event carries ``sequence_number``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from ...constrained.custom_tools import InputDeltas, input_of
from ...families.message import MessageDelta
from ...pipeline import ChatEvent, Usage
from ..errors import api_error
from ..ops.keepalive import OPENAI_KEEPALIVE
from ..sse import sse_data
from ..streaming import event_frames
from .convert import (
    custom_tool_call_item,
    custom_tool_names,
    function_call_item,
    message_item,
    new_item_id,
    output_text_part,
    reasoning_item,
    status_of,
    wants_encrypted_reasoning,
)
from .object import ResponseObject


class _Item:
    """The output item being streamed: its kind, id, index and text so far."""

    def __init__(self, kind: str, index: int, call: int | None = None, **fields):
        self.kind = kind
        self.index = index
        self.call = call
        self.id = new_item_id({"reasoning": "rs", "message": "msg"}.get(kind, "fc"))
        self.text = ""
        self.fields = fields  # call_id and name of a function call
        self.input = InputDeltas() if kind == "custom_tool_call" else None

    def snapshot(self, status: str, encrypted: bool = False) -> dict:
        if self.kind == "reasoning":
            return reasoning_item(self.id, self.text, encrypted)
        if self.kind == "message":
            return message_item(self.id, self.text, status)
        make = custom_tool_call_item if self.kind == "custom_tool_call" else function_call_item
        return make(self.id, self.fields["call_id"], self.fields["name"], self.text, status)


class ResponseStream:
    """Turns pipeline events into Responses SSE frames. ``output`` holds the finished
    items, and ``final`` the terminal response body once one was sent."""

    def __init__(self, response: ResponseObject):
        self.response = response
        self.output: list[dict] = []
        self.final: dict | None = None
        self._item: _Item | None = None
        self._sequence = 0
        self._custom = custom_tool_names(response.request)  # calls become custom_tool_call
        self._encrypted = wants_encrypted_reasoning(response.request)

    def start(self) -> list[str]:
        body = self.response.body("in_progress", [])
        return [
            self.event("response.created", response=body),
            self.event("response.in_progress", response=body),
        ]

    def frames(self, events: AsyncGenerator[ChatEvent, None]) -> AsyncIterator[str]:
        """All frames after ``start()``; raises on a failed generation (see ``failed``)."""
        return event_frames(
            events, OPENAI_KEEPALIVE, lambda event: self.delta(event.delta), self.finish
        )

    def delta(self, delta: MessageDelta) -> list[str]:
        out: list[str] = []
        if delta.reasoning_content:
            out += self._ensure("reasoning")
            self._extend(delta.reasoning_content)
            out.append(self._part_event("response.reasoning_text.delta", delta.reasoning_content))
        if delta.content:
            out += self._ensure("message")
            self._extend(delta.content)
            out.append(self._part_event("response.output_text.delta", delta.content, logprobs=[]))
        for call in delta.tool_calls:
            if call.id is not None:
                kind = "custom_tool_call" if call.name in self._custom else "function_call"
                out += self._ensure(kind, call.index, call_id=call.id, name=call.name)
            if call.arguments:
                item = self._extend(call.arguments)
                if item.input is not None:  # the input text, decoded from the JSON
                    piece = item.input.feed(call.arguments)
                    if piece:
                        out.append(self._input_event(item, piece))
                    continue
                out.append(
                    self.event(
                        "response.function_call_arguments.delta",
                        item_id=item.id,
                        output_index=item.index,
                        delta=call.arguments,
                    )
                )
        return out

    def finish(self, event: ChatEvent) -> list[str]:
        status, details = status_of(event.finish_reason or "error")
        return self.finish_with(status, details, event.usage, event.constraint_gave_up)

    def finish_with(
        self,
        status: str,
        details: dict | None,
        usage: Usage | None,
        constraint_gave_up: str | None = None,
    ) -> list[str]:
        """Close the open item and send the terminal event for ``status``."""
        out = self._close()
        self.final = self.response.body(
            status,
            self.output,
            usage,
            incomplete_details=details,
            constraint_gave_up=constraint_gave_up,
        )
        kind = "response.completed" if status == "completed" else f"response.{status}"
        out.append(self.event(kind, response=self.final))
        return out

    def failed(self, exc: Exception) -> list[str]:
        """The terminal ``response.failed`` event, whatever went wrong and wherever."""
        error = api_error(exc)
        output = list(self.output)
        if self._item is not None:
            output.append(self._item.snapshot("incomplete"))
        self.final = self.response.body(
            "failed", output, error={"code": error.code or "server_error", "message": error.message}
        )
        return [self.event("response.failed", response=self.final)]

    def close_item(self) -> list[str]:
        """Finish the item being streamed (before an item the stream does not write)."""
        return self._close()

    # -- items -----------------------------------------------------------------------------

    def _extend(self, text: str) -> _Item:
        item = self._item
        assert item is not None
        item.text += text
        return item

    def _ensure(self, kind: str, call: int | None = None, **fields) -> list[str]:
        item = self._item
        if item is not None and item.kind == kind and item.call == call:
            return []
        out = self._close()
        item = self._item = _Item(kind, len(self.output), call, **fields)
        added = item.snapshot("in_progress")
        if kind == "reasoning":
            added["content"] = []
        out.append(self.event("response.output_item.added", output_index=item.index, item=added))
        part = self._part(item, "")
        if part is not None:
            out.append(self._part_event("response.content_part.added", part=part, text=None))
        return out

    def _close(self) -> list[str]:
        item = self._item
        if item is None:
            return []
        out: list[str] = []
        if item.input is not None:
            rest = item.input.rest()
            if rest:
                out.append(self._input_event(item, rest))
            out.append(
                self.event(
                    "response.custom_tool_call_input.done",
                    item_id=item.id,
                    output_index=item.index,
                    input=input_of(item.text),
                )
            )
        elif item.kind == "function_call":
            out.append(
                self.event(
                    "response.function_call_arguments.done",
                    item_id=item.id,
                    output_index=item.index,
                    name=item.fields["name"],
                    arguments=item.text,
                )
            )
        else:
            done = (
                "response.reasoning_text.done"
                if item.kind == "reasoning"
                else "response.output_text.done"
            )
            extra: dict[str, Any] = {"logprobs": []} if item.kind == "message" else {}
            out.append(self._part_event(done, item.text, key="text", **extra))
            out.append(
                self._part_event("response.content_part.done", part=self._part(item, item.text))
            )
        final = item.snapshot("completed", self._encrypted)
        out.append(self.event("response.output_item.done", output_index=item.index, item=final))
        self.output.append(final)
        self._item = None
        return out

    def _input_event(self, item: _Item, piece: str) -> str:
        return self.event(
            "response.custom_tool_call_input.delta",
            item_id=item.id,
            output_index=item.index,
            delta=piece,
        )

    @staticmethod
    def _part(item: _Item, text: str) -> dict | None:
        if item.kind == "reasoning":
            return {"type": "reasoning_text", "text": text}
        if item.kind == "message":
            return output_text_part(text)
        return None

    # -- frames ----------------------------------------------------------------------------

    def _part_event(
        self, kind: str, text: str | None = None, *, key: str = "delta", **fields
    ) -> str:
        item = self._item
        assert item is not None
        if text is not None:
            fields[key] = text
        return self.event(kind, item_id=item.id, output_index=item.index, content_index=0, **fields)

    def event(self, kind: str, **fields) -> str:
        """One SSE frame with the next ``sequence_number``."""
        body = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return sse_data(body, event=kind)
