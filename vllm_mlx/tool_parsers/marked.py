"""The tool-call parser for every family whose calls are written between literal markers.

It is driven entirely by the family's `ToolCallFormat`: it searches content for the first
literal of a call (its *trigger*), holds the text from there until the header (markers and
function name) is decided, then hands the arguments to the dialect's reader. Text is only
held while undecided, and each character is examined a bounded number of times, so the cost
is linear in the output. A call whose header never completes is released as content; a call
that is cut off inside its arguments keeps the arguments streamed so far.

Speed: `quick` answers the feeds that only extend one field, and feeds that cannot settle
held markup are merged rather than re-matched (`_may_decide`); see `docs/parsers.md`.
"""

from __future__ import annotations

import json
import re
from enum import Enum

from vllm_mlx.families.call_ids import new_id
from vllm_mlx.families.dialects import ArgumentReader, Status
from vllm_mlx.families.formats import ToolCallFormat
from vllm_mlx.families.literal import (
    MAX_NAME,
    Match,
    first_marker,
    literal_pieces,
    match_literal,
    partial_suffix,
    skip_space,
)
from vllm_mlx.families.message import CONTENT, Quick
from vllm_mlx.tool_parsers.base import DeltaBuilder, ToolParser, parameter_schemas

_KIMI_INDEX = re.compile(r":\d+$")
_NOT_NAME = re.compile(r"[^\w.\-:/]")  # the complement of `literal.NAME_CHARS`
_MAX_HEADER = 4 * MAX_NAME
_RECHECK = 16  # characters held markup may grow by before it is re-matched
_MARKUP = re.compile(r"[{<\[]")
# Between calls models write any of these (then optional whitespace), or only whitespace,
# whatever their family's canonical separator is (Llama 3's ``; ``).
_SEPARATORS = (";\n", ",\n")


class _State(Enum):
    TEXT = "text"  # plain content, watching for a trigger
    HEADER = "header"  # a trigger was seen; markers and name still undecided
    ARGS = "args"
    AFTER = "after"  # arguments complete; expecting the call's closing markers
    BETWEEN = "between"  # inside a section, between calls
    SKIP = "skip"  # a malformed call inside a section: dropped up to its end marker


class MarkedToolParser(ToolParser):
    """Incremental parser for one `ToolCallFormat` (and its variants)."""

    def __init__(self, fmt: ToolCallFormat, tools: list[dict] | None = None) -> None:
        super().__init__(tools)
        self.fmt = fmt
        self._variants = (fmt, *fmt.variants)
        self._properties = parameter_schemas(self.tools)
        self._triggers = sorted({_trigger(v) for v in self._variants if not _at_start_only(v)})
        self._start_triggers = sorted({_trigger(v) for v in self._variants if _at_start_only(v)})
        # control markers met outside a call (a stray end marker, an end-of-turn token)
        self._strays = sorted({m for v in self._variants for m in _stray_markers(v)})
        self._watch = sorted({*self._triggers, *self._strays})
        self._trigger_chars = tuple({t[0] for t in self._watch})
        self._steps = {
            _State.TEXT: self._text,
            _State.HEADER: self._header,
            _State.ARGS: self._arguments,
            _State.AFTER: self._after,
            _State.BETWEEN: self._between,
            _State.SKIP: self._skip,
        }
        self._header_end = _last_chars(v.dialect.header_end(v) for v in self._variants)
        # a proper prefix of one trigger never holds another, so it stays undecided
        self._prefixes_undecided = not any(
            a != b and a in b for a in self._watch for b in self._watch
        )
        self._state = _State.TEXT
        self._buf = ""
        self._recheck_at = 0
        self._seen_text = False
        self._pending_ws = ""
        self._skip_ws = False
        self._gap = ""  # whitespace around the calls since the last content text
        self._verbatim = 0  # leading characters of `_buf` that a failed call gave back
        self._markup = False  # content since the last call holds markup (`_MARKUP`)
        self._index = 0
        self._active = fmt
        self._args: ArgumentReader | None = None
        self._named = True  # False: the reader finds the name after the arguments
        self._call: tuple[str, str] | None = None  # (id, name) not yet reported
        self._closing = ""  # the literal text after the current call's arguments
        self._call_raw: list[str] = []  # raw text of a call not yet reported
        self._held: list[str] = []  # its argument text read so far (`whole_calls`)
        self._skipped = ""  # a malformed call's text before `_buf` (given back if it never ends)
        self._skip_from = 0  # where in `_buf` its end marker is looked for next

    @property
    def triggers(self) -> tuple[str, ...]:
        """The texts that open a call anywhere in the output."""
        return tuple(self._triggers)

    def quick(self, text: str) -> Quick:
        """Plain text that cannot begin a call, argument text a reader passes through, or
        text merged into held markup (see `_may_decide`)."""
        state = self._state
        if state is _State.TEXT:
            if self._buf:
                return self._hold_trigger(text) if self._prefixes_undecided else None
            if not self._seen_text and self._start_triggers:
                return None
            for c in self._trigger_chars:
                if c in text:
                    return None
            if not self._markup and _MARKUP.search(text):
                self._markup = True
            if text and not (self._skip_ws or self._pending_ws or text[-1].isspace()):
                self._seen_text = True  # what `_plain` does with such text, inlined
                return CONTENT, text
            return CONTENT, self._plain(text)
        if state is _State.ARGS and not self._buf:
            assert self._args is not None
            piece = self._args.quick(text)
            if piece is not None and self._call is not None:  # not reported yet
                if self._active.whole_calls:  # held until the arguments are complete
                    self._call_raw.append(text)
                    self._held.append(piece)
                    return CONTENT, ""
                if piece:
                    return None  # the first released text reports the call: `_arguments`
                self._call_raw.append(text)
            if piece is not None:
                return self._index, piece
        if len(self._buf) + len(text) < self._recheck_at and not self._may_decide(text):
            self._buf += text
            return CONTENT, ""
        return None

    def _hold_trigger(self, text: str) -> Quick:
        """Held text that is still a proper prefix of a trigger stays held."""
        if self._start_triggers and not self._seen_text:
            return None
        held = self._buf + text
        for trigger in self._watch:
            if len(held) < len(trigger) and trigger.startswith(held):
                self._buf = held
                return CONTENT, ""
        return None

    def feed(self, text: str, out: DeltaBuilder) -> None:
        self._buf += text
        self._run(out, final=False)
        self._recheck_at = len(self._buf) + _RECHECK

    def _may_decide(self, text: str) -> bool:
        """Could ``text`` settle the header, closing or argument markup being held?

        Re-matching held markup on every feed costs as much as the rest of the stream, and
        parsing does not depend on chunking, so a feed that cannot settle it is merged with
        the next ones instead (at most `_RECHECK` characters: undecided text is released a
        little later, never differently).
        """
        state = self._state
        if state is _State.HEADER:
            ends = self._header_end
            if ends is None:  # the header ends with its name: any other character may end it
                return _NOT_NAME.search(text) is not None
        elif state is _State.AFTER:
            ends = _last_chars([self._closing])
        elif state is _State.SKIP:
            ends = _last_chars([self._active.call_end])
        elif state is _State.BETWEEN:
            v = self._active
            ends = _last_chars([lit for lit in (v.section_end, v.dialect.header_end(v)) if lit])
        else:  # ARGS: the reader knows which characters can settle its markup
            assert self._args is not None
            ends = self._args.settles
        if ends is None:
            return True
        for c in ends:
            if c in text:
                return True
        return False

    def finish(self, out: DeltaBuilder) -> None:
        self._run(out, final=True)
        if self._state is _State.ARGS and self._call is not None and any(self._held):
            if self._named_by_tools():
                self._report(out)  # a whole call cut off: kept like a streamed one
        if self._state in (_State.HEADER, _State.ARGS) and self._call_raw:
            self._release("".join(self._call_raw) + self._buf, out)
        elif self._state is _State.ARGS and self._args is not None:
            out.arguments(self._index, self._args.close())  # a cut-off call: valid JSON
            if self._args.unread:
                self._release(self._args.unread + self._buf, out)  # its last member
            elif self._buf:
                self._content(self._buf, out)
        elif self._buf:
            self._content(self._buf, out)
        self._buf = ""
        if not self._skip_ws:
            out.content(self._pending_ws)
        self._pending_ws = ""

    def _run(self, out: DeltaBuilder, final: bool) -> None:
        while True:
            before = (self._state, len(self._buf))
            self._steps[self._state](out, final)
            if not self._buf and not final:
                return  # nothing left to decide until more text comes
            if (self._state, len(self._buf)) == before:
                return

    def _text(self, out: DeltaBuilder, final: bool) -> None:
        buf = self._buf
        if not self._seen_text and self._start_triggers:
            at = skip_space(buf, 0)
            rest = buf[at:]
            if any(rest.startswith(t) for t in self._start_triggers):
                self._pending_ws, self._buf, self._state = "", rest, _State.HEADER
                return
            if not final and any(t.startswith(rest) for t in self._start_triggers):
                return
        found = [(at, t) for at, t in ((buf.find(t), t) for t in self._watch) if at >= 0]
        if found:
            at, marker = min(found, key=lambda hit: (hit[0], -len(hit[1])))
            if marker in self._triggers:
                self._content(buf[:at], out)
                self._consume(at)
                self._state = _State.HEADER
                return
            # a control marker: dropped, unless it ends a failed call's text or text that
            # looks like a call missing its opening marker (markup since the last call)
            end = at + len(marker)
            verbatim = at < self._verbatim or self._markup or _MARKUP.search(buf, 0, at)
            self._content(buf[: end if verbatim else at], out)
            self._consume(end)
            if not verbatim:
                self._hold_gap()
                self._skip_ws = True
            return
        keep = 0 if final else partial_suffix(buf, self._watch)
        self._content(buf[: len(buf) - keep], out)
        self._consume(len(buf) - keep)

    def _consume(self, n: int) -> None:
        """Drop the first ``n`` characters of the held text."""
        self._buf = self._buf[n:]
        self._verbatim = max(0, self._verbatim - n)

    def _header(self, out: DeltaBuilder, final: bool) -> None:
        prefix_of = self._section_start
        self._try_calls(out, final, [(v, prefix_of(v)) for v in self._variants], self._not_a_call)

    def _between(self, out: DeltaBuilder, final: bool) -> None:
        v = self._active
        stripped = self._buf.lstrip()  # whitespace between calls is layout
        self._gap += self._buf[: len(self._buf) - len(stripped)]
        self._buf = stripped
        if not self._buf and not final:
            return
        if v.section_end:
            state, end = match_literal(self._buf, 0, v.section_end, final)
            if state is Match.MATCH:
                self._buf, self._state, self._skip_ws = self._buf[end:], _State.TEXT, True
                return
            if state is Match.PARTIAL:
                return
        seps = (v.separator, *_SEPARATORS) if v.separator else ()
        options = [(v, sep) for sep in seps] + [(v, "")]
        self._try_calls(out, final, options, self._leave_section)

    def _try_calls(self, out, final, options, on_fail) -> None:
        """Match a call header for each (variant, leading literal); commit the first match."""
        partial = False
        for variant, lead in options:
            state, end, name = _match_header(variant, lead, self._buf, final)
            if state is Match.MATCH:
                self._commit(variant, name, end, out)
                return
            partial |= state is Match.PARTIAL
        if not partial or len(self._buf) > _MAX_HEADER:
            on_fail(out, final)

    def _commit(self, variant: ToolCallFormat, raw_name: str | None, end: int, out) -> None:
        """Start a call; ``raw_name`` None: the object names the function after its
        arguments, so the whole object is read first."""
        self._active = variant
        name = raw_name or ""
        call_id = variant.dialect.call_id(self._buf[:end]) or new_id("openai")
        self._named = raw_name is not None
        if raw_name is not None and variant.name_prefix:
            call_id = raw_name
            name = _KIMI_INDEX.sub("", raw_name.removeprefix(variant.name_prefix))
        if variant.call_id_marker and variant.call_id_marker in self._buf[:end]:
            own = self._buf[:end].split(variant.call_id_marker, 1)[1]
            call_id = own[: own.index(variant.name_end)].strip() or call_id
        dialect = variant.dialect
        self._closing = dialect.closing(variant, self._named)
        self._args = dialect.reader(self._properties.get(name, {}), self._named)
        self._call_raw = [self._buf[:end]]
        self._consume(end)
        self._state = _State.ARGS
        self._call, self._held = (call_id, name), []
        if self._args.streams and not variant.whole_calls:
            self._report(out)

    def _named_by_tools(self) -> bool:
        """Kimi's bare counter id (``0``) names no function: the call is the only tool's,
        or the one tool whose parameters hold every argument; False when none or several."""
        assert self._call is not None and self._args is not None
        call_id, name = self._call
        if not name.isdigit() or not self._named:
            return True
        fits = list(self._properties)
        if len(fits) > 1:
            try:
                keys = set(json.loads("".join(self._held) + self._args.close()))
            except ValueError:
                return False
            fits = [tool for tool in fits if keys <= set(self._properties[tool])]
        if len(fits) != 1:
            return False
        self._call = (call_id, fits[0])
        return True

    def _report(self, out: DeltaBuilder) -> None:
        """The call being read is real: report it, with any argument text held for it."""
        assert self._call is not None and self._args is not None
        call_id, name = self._call
        out.call_start(self._index, call_id, name if self._named else self._args.name)
        out.arguments(self._index, "".join(self._held))
        self._call, self._call_raw, self._held = None, [], []
        self._hold_gap()

    def _arguments(self, out: DeltaBuilder, final: bool) -> None:
        assert self._args is not None
        text, used, status = self._args.feed(self._buf, final)
        consumed = self._buf[:used]
        self._consume(used)
        if self._call is not None:
            self._call_raw.append(consumed)
            if self._active.whole_calls:
                self._held.append(text)
                if status is Status.DONE:
                    if self._named_by_tools():
                        self._report(out)
                    else:  # a bare counter no tool answers to: dropped like a bad call
                        status = Status.FAIL
                text = ""
            elif text:  # the reader's first output: the call is real
                self._report(out)
        out.arguments(self._index, text)
        if status is Status.DONE:
            self._call, self._call_raw, self._state = None, [], _State.AFTER
        elif status is Status.FAIL:
            if self._call is not None and self._active.section_start and self._active.call_end:
                # inside a calls section: the malformed call is dropped up to its end
                # marker and its siblings are still read
                self._call, self._skipped, self._skip_from = None, "".join(self._call_raw), 0
                self._held, self._state = [], _State.SKIP
            elif self._call is not None:
                self._call, self._held = None, []
                self._release("".join(self._call_raw) + self._buf, out)
            else:  # already reported: end its JSON validly, the rest is content
                out.arguments(self._index, self._args.close())
                self._buf = self._args.unread + self._buf
                self._markup = True  # its end markers stay with the rest
                self._index += 1
                self._state = _State.TEXT
            self._call_raw = []

    def _after(self, out: DeltaBuilder, final: bool) -> None:
        v = self._active
        skip = 0
        if self._named:
            state, skip = v.dialect.extra_members(self._buf, final)
            if state is Match.PARTIAL:
                return
            if skip:
                self._consume(skip)
        state, end = match_literal(self._buf, 0, self._closing, final)
        if state is Match.FAIL and self._named and self._next_in_block(v, out, final):
            return
        if state is Match.FAIL and v.args_end:  # the arguments' end tag is missing
            state, end = match_literal(self._buf, 0, v.call_end, final)
        if state is Match.FAIL and final:  # a stop string ate the rest of the closing
            if match_literal(self._buf, 0, self._closing, False)[0] is Match.PARTIAL:
                state, end = Match.MATCH, len(self._buf)
        wrapper = self._closing.rfind("}")
        if state is Match.FAIL and wrapper >= 0:
            # the call's wrapper brace is missing (small models drop it): the marker after
            # it still closes the call, and is markup, not content
            state, end = match_literal(self._buf, 0, self._closing[wrapper + 1 :], final)
        if state is Match.PARTIAL:
            return
        self._index += 1
        if state is Match.MATCH:
            self._consume(end)
        in_section = bool(v.section_start or v.separator) and state is Match.MATCH
        self._state = _State.BETWEEN if in_section else _State.TEXT
        self._skip_ws = True

    def _skip(self, out: DeltaBuilder, final: bool) -> None:
        """Drop a malformed call through its end marker, then read its siblings; a call
        that never ends is given back as content, as any unfinished call is."""
        end = self._active.call_end
        at = self._buf.find(end, self._skip_from)
        if at >= 0:
            self._consume(at + len(end))
            self._skipped, self._state, self._skip_ws = "", _State.BETWEEN, True
        elif final:
            text, self._skipped = self._skipped + self._buf, ""
            self._release(text, out)
        else:
            self._skip_from = max(0, len(self._buf) - len(end) + 1)

    def _next_in_block(self, v: ToolCallFormat, out: DeltaBuilder, final: bool) -> bool:
        """Several call objects in one block (``{…}, {…}`` or one per line inside one
        ``<tool_call>``): another object instead of the closing starts the next call.
        True when that was decided (a call started, or more text is needed)."""
        wrapper = v.dialect.closing(v, True)[: -len(v.args_end + v.call_end) or None]
        if not v.dialect.lead or not v.call_end or wrapper == v.dialect.closing(v, True):
            return False
        state, at = match_literal(self._buf, 0, wrapper, final)
        if state is not Match.MATCH:
            return False
        for lead in _SEPARATORS + ("\n",):
            state, pos = match_literal(self._buf, at, lead, final)
            if state is not Match.MATCH:
                continue
            state, end, name = v.dialect.match_header(v, self._buf, pos, final)
            if state is Match.PARTIAL:
                return True
            if state is Match.MATCH:
                self._index += 1
                self._consume(pos)
                self._commit(v, name, end - pos, out)
                return True
        return False

    def _section_start(self, variant: ToolCallFormat) -> str:
        return variant.section_start

    def _malformed_call(self, final: bool) -> bool:
        """A call's opening marker inside a section whose header does not parse (an empty
        name): skipped through the call's end marker like a call whose arguments fail."""
        for v in self._variants:
            if not (v.section_start and v.call_start and v.call_end):
                continue
            at = 0
            if self._state is _State.HEADER:
                state, at = match_literal(self._buf, 0, v.section_start, final)
                if state is not Match.MATCH:
                    continue
                at = skip_space(self._buf, at)
            elif v is not self._active:
                continue
            if match_literal(self._buf, at, v.call_start, final)[0] is Match.MATCH:
                self._active, self._skipped, self._skip_from = v, "", at
                self._state = _State.SKIP
                return True
        return False

    def _not_a_call(self, out: DeltaBuilder, final: bool) -> None:
        """A call's opening marker not followed by a call is content, except an empty
        section (its opening and end markers are dropped) and a malformed call in one."""
        if self._malformed_call(final):
            return
        for v in self._variants:
            opening = v.section_start.strip()
            if self._verbatim or not v.section_end or not _is_marker(opening):
                continue
            state, end = match_literal(self._buf, 0, opening + "\n" + v.section_end, final)
            if state is Match.PARTIAL and len(self._buf) <= _MAX_HEADER:
                return
            if state is Match.MATCH:
                self._consume(end)
                self._state = _State.TEXT
                self._hold_gap()
                self._skip_ws = True
                return
        self._abandon(out)

    def _abandon(self, out: DeltaBuilder) -> None:
        """The held text is not a call: its first character is content; rescan the rest."""
        self._content(self._buf[:1], out)
        self._consume(1)
        self._state = _State.TEXT

    def _leave_section(self, out: DeltaBuilder, final: bool) -> None:
        if not self._malformed_call(final):
            self._state = _State.TEXT

    def _release(self, text: str, out: DeltaBuilder) -> None:
        """A call that never completed: its text goes back to content, rescanned; the end
        markers that follow stay with it, however the text was chunked."""
        self._buf, self._state, self._verbatim = text, _State.TEXT, len(text)
        self._abandon(out)
        self._markup = True
        self._run(out, final=True)

    def _content(self, text: str, out: DeltaBuilder) -> None:
        if not self._markup and _MARKUP.search(text):
            self._markup = True
        out.content(self._plain(text))

    def _hold_gap(self) -> None:
        """A call starts: the whitespace before it waits for the text after it."""
        self._markup = False
        self._gap += self._pending_ws
        self._pending_ws = ""

    def _plain(self, text: str) -> str:
        """What plain ``text`` adds to content. Trailing whitespace waits for the next text;
        the whitespace around calls joins the text before them to the text after them
        (`_join_gap`), and is dropped at the ends of the content."""
        if self._skip_ws:
            stripped = text.lstrip()
            self._gap += text[: len(text) - len(stripped)]
            if not stripped:
                return ""
            text, self._skip_ws = stripped, False
            gap, self._gap = self._gap, ""
            if self._seen_text:
                self._pending_ws = _join_gap(gap)
        body = text.rstrip()
        if not body:
            self._pending_ws += text
            return ""
        released, self._pending_ws = self._pending_ws + body, text[len(body) :]
        self._seen_text = True
        return released


def _join_gap(gap: str) -> str:
    """The whitespace that separates the text before a call from the text after it: kept as
    written, except that more than one line break is one paragraph break (a call on its
    own lines between two paragraphs leaves two paragraphs, not four blank lines)."""
    return "\n\n" if gap.count("\n") > 1 else gap


def _trigger(variant: ToolCallFormat) -> str:
    """The first literal text of a call, which starts holding text back."""
    return first_marker(variant.section_start + variant.call_start + variant.dialect.lead)


def _is_marker(text: str) -> bool:
    """Does ``text`` look like a special token (``<|…|>``, ``</…>``, ``[…]``)?"""
    return len(text) > 3 and text[0] + text[-1] in ("<>", "[]")


def _stray_markers(variant: ToolCallFormat) -> list[str]:
    """The markers that end calls or sections: never content when met outside a call."""
    literals = (variant.args_end, variant.call_end, variant.section_end)
    pieces = [p for lit in literals for p in literal_pieces(lit) if _is_marker(p)]
    return pieces


def _last_chars(literals) -> str | None:
    """The characters that can complete any of ``literals`` (each ends with its last
    non-whitespace character); None when one may end anywhere (it is only whitespace)."""
    chars = set()
    for literal in literals:
        body = literal.rstrip()
        if not body:
            return None
        chars.add(body[-1])
    return "".join(sorted(chars))


def _at_start_only(variant: ToolCallFormat) -> bool:
    """A bare JSON opening (``{``) counts as a call only at the start of the output; a bare
    call list (``[name(``) anywhere, since its header is distinctive (Llama 4 writes the
    list after prose)."""
    return len(_trigger(variant)) == 1 and not variant.name_end


def _match_header(
    v: ToolCallFormat, lead: str, text: str, final: bool
) -> tuple[Match, int, str | None]:
    """Match ``lead``, the call's opening markers and its name at the start of ``text``."""
    state, pos = match_literal(text, 0, lead + v.call_start, final)
    if state is not Match.MATCH:
        return state, pos, ""
    return v.dialect.match_header(v, text, pos, final)
