"""Control markers that are never content: a wrapper that removes them from a parser's content.

Some families wrap their answer in markers (Command-R's ``<|START_RESPONSE|>`` …
``<|END_RESPONSE|>``) or end a turn with a token the stop strings may not catch (Nemotron's
``<SPECIAL_12>``, DeepSeek's ``<｜end▁of▁sentence｜>``). The family lists them in
`ToolCallFormat.dropped`; this wrapper removes them from the content the inner parser
reports, holding back only a possible start of one, so streaming still equals non-streaming.
"""

from __future__ import annotations

from vllm_mlx.families.literal import partial_suffix
from vllm_mlx.families.message import Quick
from vllm_mlx.tool_parsers.base import DeltaBuilder, ToolParser


class DroppingToolParser(ToolParser):
    """``inner``'s events, with every marker of ``dropped`` removed from its content."""

    def __init__(self, inner: ToolParser, dropped: tuple[str, ...]) -> None:
        super().__init__(inner.tools)
        self._inner = inner
        self._dropped = [m for m in dropped if m]
        self._first = "".join({m[0] for m in self._dropped})
        self._held = ""
        self._events = DeltaBuilder()

    def quick(self, text: str) -> Quick:
        """The inner parser's answer when ``text`` cannot hold (a part of) a marker."""
        if self._held:
            return None
        for c in self._first:
            if c in text:
                return None
        return self._inner.quick(text)

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
        buf = self._held + text
        if not buf:
            return ""
        changed = True
        while changed:  # removing one marker may join the halves of another
            changed = False
            for marker in self._dropped:
                if marker in buf:
                    buf, changed = buf.replace(marker, ""), True
        keep = 0 if final else partial_suffix(buf, self._dropped)
        self._held = buf[len(buf) - keep :]
        return buf[: len(buf) - keep]
