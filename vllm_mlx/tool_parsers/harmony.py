"""Harmony (gpt-oss): reasoning and tool calls are both channels of one message stream.

Each message is ``<|start|>ROLE HEADER<|message|>BODY`` ended by ``<|end|>``, ``<|call|>``
or ``<|return|>``. The header names the channel (``<|channel|>analysis|commentary|final``)
and maybe a recipient (`` to=functions.NAME``, before or after the channel), maybe followed
by ``<|constrain|>json``. analysis is reasoning; a body addressed to ``functions.NAME`` is a
tool call whose JSON arguments stream as they arrive; everything else is content. The prompt
tail (``<|start|>assistant``) says generation begins inside a header. Every marker is read from
the family's `Channels` (`families.formats.HARMONY`), the description the formats are derived
from.
"""

from __future__ import annotations

import re
from enum import Enum

from vllm_mlx.families.call_ids import new_id
from vllm_mlx.families.dialects import Status
from vllm_mlx.families.dialects.json_arguments import JsonArguments
from vllm_mlx.families.formats import Channels
from vllm_mlx.families.literal import partial_suffix
from vllm_mlx.families.message import CONTENT, REASONING, Quick
from vllm_mlx.tool_parsers.base import DeltaBuilder, ToolParser

_MAX_HEADER = 512


class _State(Enum):
    OUTSIDE = "outside"
    HEADER = "header"
    BODY = "body"


class _Route(Enum):
    REASONING = "reasoning"
    CONTENT = "content"
    CALL = "call"


class HarmonyParser(ToolParser):
    """Splits a Harmony message stream into reasoning, content and tool calls."""

    def __init__(
        self,
        channels: Channels,
        tools: list[dict] | None = None,
        *,
        reasoning: bool,
        tool_calls: bool,
        prompt_tail: str = "",
    ) -> None:
        super().__init__(tools)
        self._ch = channels
        self._start, self._ends = channels.start, channels.ends
        self._openings = [channels.start, channels.channel]
        self._channel = re.compile(re.escape(channels.channel) + r"\s*(\w+)")
        self._recipient = re.compile(r"\b" + re.escape(channels.recipient) + r"([^\s<]+)")
        # the pieces of a header, for `_is_bare_header` (one alternation, no nested repeats:
        # linear on any text, as a hostile output may be)
        to, channel, constrain = (
            re.escape(m) for m in (channels.recipient, channels.channel, channels.constrain)
        )
        self._header_piece = re.compile(
            rf"(?P<marker>{channel}|{constrain})|(?P<to>{to}[^\s<]*)|(?P<word>\w+)|\s+|.",
            re.DOTALL,
        )
        self._reasoning = reasoning
        self._tool_calls = tool_calls
        self._state = _State.OUTSIDE
        self._buf = ""
        self._header = ""
        self._route = _Route.CONTENT
        self._call_name: str | None = None  # a call whose arguments have not begun yet
        self._args: JsonArguments | None = None
        self._index = 0
        self._skip_ws = False  # after a call whose message did not end: whitespace is layout
        self._between = False  # a message ended: whitespace before the next one is layout
        at = prompt_tail.rfind(self._start)
        if at >= 0 and not any(e in prompt_tail[at:] for e in self._ends):
            self._state, self._buf = _State.HEADER, prompt_tail[at + len(self._start) :]
            self._silent = len(self._buf)  # prompt text: decides the state, never emitted
        else:
            self._silent = 0

    def quick(self, text: str) -> Quick:
        """Text with no ``<`` outside a header cannot hold a marker: it extends the current
        route (or argument text a JSON string passes through)."""
        if self._buf or self._skip_ws or self._between or self._state is _State.HEADER:
            return None
        if "<" in text:
            return None
        if self._state is _State.OUTSIDE or self._route is _Route.CONTENT:
            return CONTENT, text
        if self._route is _Route.REASONING:
            return REASONING, text
        if self._args is None:
            return None
        piece = self._args.quick(text)
        return None if piece is None else (self._index, piece)

    def feed(self, text: str, out: DeltaBuilder) -> None:
        self._buf += text
        self._run(out, final=False)

    def finish(self, out: DeltaBuilder) -> None:
        self._run(out, final=True)
        if self._state is _State.HEADER:
            header = self._header[self._silent :] + self._buf
            if not self._is_bare_header(header):  # not a header after all: text
                out.content(header)
        elif self._buf:
            self._emit(self._buf, out)
        self._buf = self._header = ""

    def _is_bare_header(self, header: str) -> bool:
        """Does an unfinished header hold only what a header holds before its message (a
        role, channel names, a recipient, a constraint)? Then the model stopped there and
        none of it is content. A word is allowed first (the role) or right after a marker."""
        word_allowed = True
        for piece in self._header_piece.finditer(header):
            kind = piece.lastgroup
            if kind == "marker":
                word_allowed = True
            elif kind == "to" or (kind == "word" and word_allowed):
                word_allowed = False
            elif not piece.group().isspace():
                return False
        return True

    def _run(self, out: DeltaBuilder, final: bool) -> None:
        while True:
            before = (self._state, len(self._buf))
            if self._state is _State.OUTSIDE:
                self._outside(out, final)
            elif self._state is _State.HEADER:
                self._in_header(out, final)
            else:
                self._body(out, final)
            if (self._state, len(self._buf)) == before:
                return

    def _outside(self, out: DeltaBuilder, final: bool) -> None:
        if self._skip_ws:  # right after a call's JSON: its message's end marker, if any
            stripped = self._buf.lstrip()
            if not final and stripped and any(e.startswith(stripped) for e in self._ends):
                self._buf = stripped
                return  # maybe the end marker, still arriving
            end = next((e for e in self._ends if stripped.startswith(e)), "")
            self._buf, self._skip_ws = stripped[len(end) :], not stripped
        if self._between:
            self._buf = self._buf.lstrip()
            if not self._buf:
                return
            self._between = False
        hits = [(self._buf.find(m), m) for m in self._openings]
        found = [(at, m) for at, m in hits if at >= 0]
        if not found:
            keep = 0 if final else partial_suffix(self._buf, self._openings)
            out.content(self._buf[: len(self._buf) - keep])
            self._buf = self._buf[len(self._buf) - keep :]
            return
        at, marker = min(found)
        out.content(self._buf[:at])
        skip = len(self._start) if marker == self._start else 0
        self._buf, self._state, self._header = self._buf[at + skip :], _State.HEADER, ""
        self._silent = 0

    def _in_header(self, out: DeltaBuilder, final: bool) -> None:
        message = self._ch.message
        at = self._buf.find(message)
        if at < 0:
            if len(self._header) + len(self._buf) > _MAX_HEADER:
                out.content(self._header[self._silent :] + self._buf)
                self._buf, self._header, self._state = "", "", _State.OUTSIDE
            return
        self._header += self._buf[:at]
        self._buf, self._state = self._buf[at + len(message) :], _State.BODY
        channel = self._channel.search(self._header)
        recipient = self._recipient.search(self._header)
        name = recipient.group(1) if recipient else ""
        functions = self._ch.functions
        if self._tool_calls and name.startswith(functions) and len(name) > len(functions):
            self._route, self._call_name = _Route.CALL, name[len(functions) :]
        elif self._reasoning and channel and channel.group(1) == self._ch.reasoning_channel:
            self._route = _Route.REASONING
        else:
            self._route = _Route.CONTENT
        self._header, self._silent = "", 0

    def _body(self, out: DeltaBuilder, final: bool) -> None:
        ends = self._ends
        hits = [at for at in (self._buf.find(e) for e in ends) if at >= 0]
        if hits:
            at = min(hits)
            end = next(e for e in ends if self._buf.startswith(e, at))
            body, self._buf = self._buf[:at], self._buf[at + len(end) :]
            self._emit(body, out, final=True)
            self._state = _State.OUTSIDE
            self._end_message(out)
            return
        cut = len(self._buf) - (0 if final else partial_suffix(self._buf, list(ends)))
        body, self._buf = self._buf[:cut], self._buf[cut:]
        self._emit(body, out, final=final)

    def _emit(self, text: str, out: DeltaBuilder, final: bool = True) -> None:
        if self._route is _Route.REASONING:
            out.reasoning(text)
        elif self._route is _Route.CONTENT:
            out.content(text)
        else:
            self._call_text(text, out, final)

    def _call_text(self, text: str, out: DeltaBuilder, final: bool) -> None:
        if self._call_name is not None:
            stripped = text.lstrip()
            if not stripped:
                return
            if not stripped.startswith("{"):
                self._route, self._call_name = _Route.CONTENT, None
                out.content(text)
                return
            out.call_start(self._index, new_id("openai"), self._call_name)
            self._call_name, self._args, text = None, JsonArguments(), stripped
        assert self._args is not None
        args, used, status = self._args.feed(text, final)
        out.arguments(self._index, args)
        rest = text[used:]
        if status is Status.DONE:  # the next message may follow without this one's end
            self._index += 1
            self._route, self._args, self._state = _Route.CONTENT, None, _State.OUTSIDE
            self._buf, self._skip_ws = rest + self._buf, True
        elif status is not Status.MORE:
            self._index += 1
            self._route, self._args = _Route.CONTENT, None
            out.content(rest.strip() if status is Status.DONE else rest)
        elif rest:
            self._buf = rest + self._buf  # a number or literal still undecided

    def _end_message(self, out: DeltaBuilder) -> None:
        if self._args is not None:  # the call ended before its JSON closed
            self._index += 1
        self._args, self._call_name, self._route = None, None, _Route.CONTENT
        self._between = True
