"""Families whose generation prompt already wrote the opening of the first call.

Functionary v3.2's prompt ends with ``>>>``, so the output begins with a recipient name
(``all\\nHello`` or ``get_weather\\n{...}``). The wrapper feeds the inner parser that opening
first, and removes it again from the start of the content (where it opened no call).
"""

from __future__ import annotations

from vllm_mlx.families.message import Quick
from vllm_mlx.tool_parsers.base import DeltaBuilder, ToolParser


class ContinuedToolParser(ToolParser):
    """``inner`` fed ``opening`` + the output; the opening never reaches content."""

    def __init__(self, inner: ToolParser, opening: str) -> None:
        super().__init__(inner.tools)
        self._inner = inner
        self._opening = opening
        self._started = False
        self._settled = False  # the first content was seen (its opening removed)
        self._held = ""
        self._events = DeltaBuilder()

    def quick(self, text: str) -> Quick:
        return self._inner.quick(text) if self._settled else None

    @property
    def triggers(self) -> tuple[str, ...]:
        return self._inner.triggers

    def feed(self, text: str, out: DeltaBuilder) -> None:
        if not self._started:
            self._started, text = True, self._opening + text
        self._inner.feed(text, self._events)
        self._forward(out, final=False)

    def finish(self, out: DeltaBuilder) -> None:
        if not self._started:
            self._started = True
            self._inner.feed(self._opening, self._events)
        self._inner.finish(self._events)
        self._forward(out, final=True)

    def _forward(self, out: DeltaBuilder, final: bool) -> None:
        delta = self._events.take()
        content = delta.content
        if not self._settled and (content or final):
            content = self._without_opening(content, final)
        out.content(content)
        for piece in delta.tool_calls:
            if piece.name is not None:
                out.call_start(piece.index, piece.id or "", piece.name)
            out.arguments(piece.index, piece.arguments)

    def _without_opening(self, text: str, final: bool) -> str:
        held = self._held + text
        if held.startswith(self._opening):
            self._settled, self._held = True, ""
            return held[len(self._opening) :]
        if self._opening.startswith(held):
            self._held = "" if final else held
            if final:
                self._settled = True
            return ""
        self._settled, self._held = True, ""
        return held
