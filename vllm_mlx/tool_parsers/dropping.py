"""Control markers that are never content: a wrapper that removes them from a parser's content.

Some families wrap their answer in markers (Command-R's ``<|START_RESPONSE|>`` …
``<|END_RESPONSE|>``) or end a turn with a token the stop strings may not catch (Nemotron's
``<SPECIAL_12>``, DeepSeek's ``<｜end▁of▁sentence｜>``). The family lists them in
`ToolCallFormat.dropped`; this wrapper removes them from the content the inner parser
reports, holding back only a possible start of one, so streaming still equals non-streaming.
"""

from __future__ import annotations

from vllm_mlx.families.literal import partial_suffix
from vllm_mlx.families.message import CONTENT, Quick
from vllm_mlx.tool_parsers.base import DeltaBuilder, ToolParser


class DroppingToolParser(ToolParser):
    """``inner``'s events, with every marker of ``dropped`` removed from its content."""

    def __init__(self, inner: ToolParser, dropped: tuple[str, ...]) -> None:
        super().__init__(inner.tools)
        self._inner = inner
        self._dropped = [m for m in dropped if m]
        self._first = "".join({m[0] for m in self._dropped})
        self._held = ""
        self._seen = False  # content was released
        self._strip = False  # a marker opened the content: drop the whitespace after it
        self._events = DeltaBuilder()

    def quick(self, text: str) -> Quick:
        """The inner parser's answer when ``text`` cannot hold (a part of) a marker."""
        if self._held or self._strip:
            return None
        for c in self._first:
            if c in text:
                return None
        hit = self._inner.quick(text)
        if hit is not None and hit[0] == CONTENT and hit[1]:
            self._seen = True
        return hit

    @property
    def triggers(self) -> tuple[str, ...]:
        return self._inner.triggers

    def feed(self, text: str, out: DeltaBuilder) -> None:
        self._inner.feed(text, self._events)
        self._forward(out, final=False)

    def finish(self, out: DeltaBuilder) -> None:
        self._inner.finish(self._events)
        self._forward(out, final=True)

    def _forward(self, out: DeltaBuilder, final: bool) -> None:
        delta = self._events.take()
        out.content(self._without_markers(delta.content, final))
        for piece in delta.tool_calls:
            if piece.name is not None:
                out.call_start(piece.index, piece.id or "", piece.name)
            out.arguments(piece.index, piece.arguments)

    def _without_markers(self, text: str, final: bool) -> str:
        """``text`` without the markers; a possible start of one is held back, and so is
        leading whitespace (a marker that opens the content takes the whitespace around it)."""
        buf, self._held = self._held + text, ""
        out: list[str] = []
        while buf:
            if self._strip:
                buf = buf.lstrip()
                if not buf:
                    break
            hits = [(buf.find(m), -len(m), m) for m in self._dropped if m in buf]
            if hits:
                at, _, marker = min(hits)
                before, buf = buf[:at], buf[at + len(marker) :]
                if not self._seen and not before.strip():
                    self._strip = True  # the marker opens the content
                else:
                    self._emit(before, out)
                continue
            keep = 0 if final else partial_suffix(buf, self._dropped)
            rest, self._held = buf[: len(buf) - keep], buf[len(buf) - keep :]
            if not self._seen and not final and not rest.strip():
                rest, self._held = "", rest + self._held
            self._emit(rest, out)
            break
        return "".join(out)

    def _emit(self, piece: str, out: list[str]) -> None:
        if piece:
            out.append(piece)
            if piece.strip():
                self._seen, self._strip = True, False
