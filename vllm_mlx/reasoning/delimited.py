"""The reasoning parser for families whose reasoning is one delimited block.

qwen3, deepseek_r1, glm45, mistral, gemma4 and seed_oss all write
``START reasoning END content``; they differ only in the delimiters and in whether the block
is already open when generation begins (the template opened it, or the prompt tail shows it).
The block is recognised only at the start of the output (after whitespace), so text that merely
mentions a tag later is content, identically in streaming and non-streaming mode. A family may
open it with other delimiters too (`ReasoningFormat.alternatives`) and name it with a label
word after the opening (`ReasoningFormat.label`), which is not reasoning.
"""

from __future__ import annotations

from enum import Enum

from vllm_mlx.families.formats import ReasoningFormat
from vllm_mlx.families.literal import partial_suffix
from vllm_mlx.families.message import CONTENT, REASONING, Quick

Pieces = list[tuple[bool, str]]  # (is_reasoning, text) in output order


class _Phase(Enum):
    BEFORE = "before"  # nothing but whitespace so far; a START may still come
    OPENING = "opening"  # inside the block; a redundant START may still be written
    LABEL = "label"  # START seen; the family's label word may follow
    LEADING = "leading"  # after the label: whitespace dropped, then reasoning
    REASONING = "reasoning"
    CALL = "call"  # a tool call opened inside the block: held until the block ends or not
    AFTER = "after"  # block closed: content, leading whitespace dropped
    CONTENT = "content"  # plain content for good


def _opened_pair(fmt: ReasoningFormat, prompt_tail: str) -> tuple[str, str] | None:
    """The (start, end) pair whose block the prompt tail left open, if any."""
    pairs = delimiters(fmt)
    return next((p for p in pairs if prompt_tail.rfind(p[0]) > prompt_tail.rfind(p[1])), None)


def opened_by_prompt(fmt: ReasoningFormat, prompt_tail: str) -> bool:
    """Does generation begin inside the reasoning block?"""
    if _opened_pair(fmt, prompt_tail) is not None:
        return True
    if fmt.starts_in_reasoning:
        return all(prompt_tail.rfind(end) < 0 for _, end in delimiters(fmt))
    return False


def delimiters(fmt: ReasoningFormat) -> list[tuple[str, str]]:
    """Every (start, end) pair the family writes, its own first."""
    return [(fmt.start, fmt.end), *fmt.alternatives]


class DelimitedReasoningParser:
    """Splits text into reasoning and content pieces, incrementally."""

    def __init__(
        self, fmt: ReasoningFormat, prompt_tail: str = "", call_markers: tuple[str, ...] = ()
    ) -> None:
        """``call_markers``: the texts that open a tool call (the tool format's, else the
        family's own `ReasoningFormat.call_markers`)."""
        self.fmt = fmt
        self._phase = _Phase.OPENING if opened_by_prompt(fmt, prompt_tail) else _Phase.BEFORE
        self._held = ""
        self._calls = tuple(call_markers or fmt.call_markers)
        self._pairs = delimiters(fmt)
        # the end to watch for: the one of the pair the prompt opened, else the family's own
        opened = _opened_pair(fmt, prompt_tail)
        self._close(opened[1] if opened else fmt.end)
        self._searched = 0  # how much of a held call was searched for the end marker

    def _close(self, end: str) -> None:
        """Watch for ``end``: the end marker of the block that was opened."""
        self._end = end
        self._watch = (end, *self._calls)
        self._firsts = "".join({m[0] for m in self._watch})

    @property
    def done(self) -> bool:
        """Only plain content can follow: the parser has nothing left to do."""
        return self._phase is _Phase.CONTENT and not self._held

    def quick(self, text: str) -> Quick:
        """The whole of ``text`` is content, or reasoning that cannot hold the end marker."""
        if self._held:
            return None
        phase = self._phase
        if phase is _Phase.CONTENT:
            return CONTENT, text
        if phase is _Phase.REASONING and not any(c in text for c in self._firsts):
            return REASONING, text
        return None

    def feed(self, text: str) -> Pieces:
        out: Pieces = []
        buf = self._held + text
        self._held = ""
        while buf:
            if self._phase is _Phase.CONTENT:
                out.append((False, buf))
                break
            if self._phase is _Phase.AFTER:
                stripped = buf.lstrip()
                if stripped:
                    self._phase = _Phase.CONTENT
                buf = stripped
                continue
            if self._phase in (_Phase.BEFORE, _Phase.OPENING):
                stripped = buf.lstrip()
                opened = next(((s, e) for s, e in self._pairs if stripped.startswith(s)), None)
                if opened is not None:
                    self._close(opened[1])
                    self._phase = _Phase.LABEL if self.fmt.label else _Phase.REASONING
                    buf = stripped[len(opened[0]) :]
                elif any(s.startswith(stripped) for s, _ in self._pairs):
                    self._held = buf  # whitespace or a partial START: undecided
                    break
                else:
                    opening = self._phase is _Phase.OPENING
                    self._phase = _Phase.REASONING if opening else _Phase.CONTENT
                continue
            if self._phase is _Phase.LABEL:
                label = self.fmt.label
                rest = buf[len(label) :] if buf.startswith(label) else None
                if (rest == "") or (rest is None and label.startswith(buf)):
                    self._held = buf  # the label may still be a longer word
                    break
                labelled = rest is not None and (rest[0].isspace() or rest.startswith(self._end))
                self._phase = _Phase.LEADING if labelled else _Phase.REASONING
                buf = rest if labelled and rest is not None else buf
                continue
            if self._phase is _Phase.LEADING:
                buf = buf.lstrip()
                if buf:
                    self._phase = _Phase.REASONING
                continue
            if self._phase is _Phase.CALL:
                at = buf.find(self._end, max(0, self._searched - len(self._end) + 1))
                if at < 0:  # still undecided: the whole call stays held
                    self._held, self._searched = buf, len(buf)
                    break
                out.append((True, buf[:at]))  # the block closed: it was reasoning
                self._phase, self._searched = _Phase.AFTER, 0
                buf = buf[at + len(self._end) :]
                continue
            before, marker, after = _split_first(buf, self._watch)
            if before:
                out.append((True, before))
            if marker == self._end:
                self._phase = _Phase.AFTER
                buf = after
            elif marker:
                self._phase = _Phase.CALL
                buf = marker + after
            else:
                self._held = after
                break
        return out

    def finish(self) -> Pieces:
        held, self._held = self._held, ""
        if not held:
            return []
        if self._phase is _Phase.CALL:  # the block never closed: the call is a call
            return [(False, held)]
        if self._phase is _Phase.LABEL:  # the output ended inside the label word
            return [] if held == self.fmt.label else [(True, held)]
        if self._phase in (_Phase.REASONING, _Phase.OPENING):
            return [(True, held)]
        if self._phase is _Phase.AFTER:
            return []
        return [(False, held)]


def _split_first(text: str, markers: tuple[str, ...]) -> tuple[str, str, str]:
    """(before, marker, after) at the first of ``markers``; without one, marker is "" and
    ``after`` is the held-back tail that could still begin one."""
    hits = [(at, m) for at, m in ((text.find(m), m) for m in markers) if at >= 0]
    if hits:
        at, marker = min(hits)
        return text[:at], marker, text[at + len(marker) :]
    keep = partial_suffix(text, list(markers))
    return text[: len(text) - keep], "", text[len(text) - keep :]
