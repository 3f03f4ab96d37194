"""The output stream of a forced custom-tool call with a grammar (see
`vllm_mlx.constrained.custom_tools`): the answer after any reasoning is the raw input, and
it is reported as one call of the tool."""

from __future__ import annotations

import json

from vllm_mlx.constrained.custom_tools import CUSTOM_INPUT, arguments_of
from vllm_mlx.families.call_ids import IdStyle, new_id
from vllm_mlx.families.message import MessageDelta, ParsedMessage, ToolCall, ToolCallDelta

from .stream import OutputStream


class RawCallStream(OutputStream):
    """The output of a forced grammar call: reasoning as usual, then the raw input, which
    becomes one call of ``name`` (its arguments the input as JSON, streamed as written)."""

    _HEAD = '{"' + CUSTOM_INPUT + '": "'

    def __init__(self, inner: OutputStream, name: str, id_style: IdStyle = "openai") -> None:
        self._inner = inner
        self._name = name
        self._id = new_id(id_style, name)  # in the family's shape, as its template expects
        self._started = False

    def feed(self, text: str) -> MessageDelta:
        return self._wrap(self._inner.feed(text))

    def finish(self) -> MessageDelta:
        delta = self._wrap(self._inner.finish())
        if self._started:
            delta.tool_calls.append(ToolCallDelta(0, None, None, '"}'))
        return delta

    @property
    def message(self) -> ParsedMessage:
        """The call once its input has begun: output cut off inside the reasoning has no
        call (nor, then, has an answer that is empty)."""
        inner = self._inner.message
        if not self._started:
            return ParsedMessage(inner.reasoning_content, None, [])
        call = ToolCall(self._id, self._name, arguments_of(inner.content or ""))
        return ParsedMessage(inner.reasoning_content, None, [call])

    def _wrap(self, delta: MessageDelta) -> MessageDelta:
        out = MessageDelta(delta.reasoning_content)
        if not delta.content:
            return out
        piece = json.dumps(delta.content, ensure_ascii=False)[1:-1]
        if not self._started:
            self._started = True
            out.tool_calls.append(ToolCallDelta(0, self._id, self._name, self._HEAD + piece))
        else:
            out.tool_calls.append(ToolCallDelta(0, None, None, piece))
        return out
