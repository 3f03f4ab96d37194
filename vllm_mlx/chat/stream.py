"""The per-request output stream: model text in, message deltas out.

Text passes through the reasoning parser first; only what it classifies as content reaches
the tool parser, so tool syntax inside reasoning is never a call. Non-streaming parsing is one
``feed`` plus ``finish`` of the same object, so both modes agree by construction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from vllm_mlx.families.call_ids import IdStyle, accepts, new_id
from vllm_mlx.families.formats import ReasoningFormat, ToolCallFormat
from vllm_mlx.families.message import (
    CONTENT,
    REASONING,
    MessageDelta,
    ParsedMessage,
    Quick,
    ToolCall,
    ToolCallDelta,
)
from vllm_mlx.reasoning import DelimitedReasoningParser
from vllm_mlx.tool_parsers import HarmonyParser, content_parser, marked_parser
from vllm_mlx.tool_parsers.base import DeltaBuilder, ToolParser

log = logging.getLogger(__name__)


class _ReasoningStage(Protocol):
    def feed(self, text: str) -> list[tuple[bool, str]]: ...
    def finish(self) -> list[tuple[bool, str]]: ...
    def quick(self, text: str) -> Quick: ...
    @property
    def done(self) -> bool: ...


class _WholeParser(Protocol):
    """A parser that handles reasoning and tool calls itself (Harmony's channels)."""

    def feed(self, text: str, out: DeltaBuilder) -> None: ...
    def finish(self, out: DeltaBuilder) -> None: ...
    def quick(self, text: str) -> Quick: ...


class OutputStream:
    """Feeds model text through the parsers and keeps the message assembled so far."""

    def __init__(
        self,
        reasoning: _ReasoningStage | None = None,
        tools: ToolParser | None = None,
        whole: _WholeParser | None = None,
        id_style: IdStyle = "openai",
    ) -> None:
        self._id_style = id_style
        self._reasoning = reasoning
        self._tools = tools
        self._whole = whole
        self._out = DeltaBuilder()
        self._reasoning_text: list[str] = []
        self._content_text: list[str] = []
        self._calls: list[ToolCall] = []
        self._arguments: list[list[str]] = []
        self._finished = False
        self._quick = self._pick_quick()

    def feed(self, text: str) -> MessageDelta:
        """Consume a piece of model output; return what it adds to the message."""
        if self._finished:
            raise RuntimeError("feed() after finish()")
        hit = self._quick(text)  # most feeds only extend one field (see `tool_parsers.base`)
        if hit is None:
            out = self._out
            if self._whole is not None:
                self._whole.feed(text, out)
            elif self._reasoning is not None:
                self._route(self._reasoning.feed(text), out)
                self._drop_finished_reasoning()
            else:
                assert self._tools is not None
                self._tools.feed(text, out)
            return self._accept(out.take())
        where, piece = hit
        if not piece:
            return MessageDelta("", "", [])
        if where == CONTENT:
            self._content_text.append(piece)
            return MessageDelta("", piece, [])
        if where == REASONING:
            self._reasoning_text.append(piece)
            return MessageDelta(piece, "", [])
        delta = MessageDelta("", "", [ToolCallDelta(where, None, None, piece)])
        if where >= len(self._arguments):
            return self._accept(delta)  # logs the parser bug and drops the piece
        self._arguments[where].append(piece)
        return delta

    def _pick_quick(self) -> Callable[[str], Quick]:
        """The cheapest fast path for the stages that still have work."""
        if self._whole is not None:
            return self._whole.quick
        if self._reasoning is not None:
            return self._staged_quick
        if self._tools is not None:
            return self._tools.quick
        return _all_content

    def _staged_quick(self, text: str) -> Quick:
        assert self._reasoning is not None
        hit = self._reasoning.quick(text)
        if hit is None or hit[0] != CONTENT:
            return hit
        self._drop_finished_reasoning()
        return hit if self._tools is None else self._tools.quick(text)

    def _drop_finished_reasoning(self) -> None:
        """Once only plain content can follow, the reasoning stage leaves the hot path."""
        if self._reasoning is not None and self._reasoning.done:
            self._reasoning = None
            self._quick = self._pick_quick()

    def finish(self) -> MessageDelta:
        """The output has ended: release everything held back."""
        if self._finished:
            return MessageDelta()
        out = self._out
        if self._whole is not None:
            self._whole.finish(out)
        else:
            if self._reasoning is not None:
                self._route(self._reasoning.finish(), out)
            if self._tools is not None:
                self._tools.finish(out)
        self._finished = True
        return self._accept(out.take())

    @property
    def message(self) -> ParsedMessage:
        """The message assembled so far (final once `finish` has been called)."""
        calls = [
            ToolCall(id=c.id, name=c.name, arguments="".join(args))
            for c, args in zip(self._calls, self._arguments, strict=True)
        ]
        return ParsedMessage(
            reasoning_content="".join(self._reasoning_text) or None,
            content="".join(self._content_text) or None,
            tool_calls=calls,
        )

    def _route(self, pieces: list[tuple[bool, str]], out: DeltaBuilder) -> None:
        for is_reasoning, text in pieces:
            if is_reasoning:
                out.reasoning(text)
            elif self._tools is not None:
                self._tools.feed(text, out)
            else:
                out.content(text)

    def _accept(self, delta: MessageDelta) -> MessageDelta:
        """Record a delta, dropping (and logging) any tool-call piece that would contradict
        what was already streamed: a parser bug must not reach a client as garbage."""
        if delta.reasoning_content:
            self._reasoning_text.append(delta.reasoning_content)
        if delta.content:
            self._content_text.append(delta.content)
        if not delta.tool_calls:
            return delta
        kept: list[ToolCallDelta] = []
        for piece in delta.tool_calls:
            if piece.name is not None:
                if piece.index != len(self._calls) or not piece.id:
                    log.error("parser bug: tool call %d started out of order", piece.index)
                    continue
                if not accepts(self._id_style, piece.id):  # a generated id, not the model's
                    piece.id = new_id(self._id_style, piece.name, piece.index)
                self._calls.append(ToolCall(id=piece.id, name=piece.name, arguments=""))
                self._arguments.append([])
            elif piece.index >= len(self._calls):
                log.error("parser bug: arguments for unknown tool call %d", piece.index)
                continue
            self._arguments[piece.index].append(piece.arguments)
            kept.append(piece)
        delta.tool_calls = kept
        return delta


def _all_content(text: str) -> Quick:
    return CONTENT, text


def make_output_stream(
    *,
    reasoning_format: ReasoningFormat | None,
    tool_format: ToolCallFormat | None,
    tools: list[dict] | None = None,
    prompt_tail: str = "",
    id_style: IdStyle = "openai",
) -> OutputStream:
    """A stream for one request in these formats (None: the family has no such syntax; with
    both None the stream passes content through). A family written as channels (Harmony) is
    parsed whole, reasoning and calls together. Call ids the parser generates are replaced by
    ids in ``id_style`` (the family's shape); ids the model wrote in that shape are kept."""
    reasoning_channels = reasoning_format.channels if reasoning_format else None
    tool_channels = tool_format.channels if tool_format else None
    channels = reasoning_channels or tool_channels
    if channels is not None:
        whole = HarmonyParser(
            channels,
            tools=tools,
            reasoning=reasoning_channels is not None,
            tool_calls=tool_channels is not None,
            prompt_tail=prompt_tail,
        )
        return OutputStream(whole=whole, id_style=id_style)
    answer_wrappers = reasoning_format.dropped if reasoning_format else ()
    tool_parser = (
        marked_parser(tool_format, tools, answer_wrappers)
        if tool_format
        else content_parser(answer_wrappers)
    )
    calls = tool_parser.triggers if tool_parser else ()  # a call may end an unclosed block
    return OutputStream(
        reasoning=DelimitedReasoningParser(reasoning_format, prompt_tail, calls)
        if reasoning_format
        else None,
        tools=tool_parser,
        id_style=id_style,
    )


def parse_output(
    text: str,
    *,
    reasoning_format: ReasoningFormat | None,
    tool_format: ToolCallFormat | None,
    tools: list[dict] | None = None,
    prompt_tail: str = "",
    id_style: IdStyle = "openai",
) -> ParsedMessage:
    """Parse a complete output: exactly one feed and finish of the streaming parser."""
    stream = make_output_stream(
        reasoning_format=reasoning_format,
        tool_format=tool_format,
        tools=tools,
        prompt_tail=prompt_tail,
        id_style=id_style,
    )
    stream.feed(text)
    stream.finish()
    return stream.message
