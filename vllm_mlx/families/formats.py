"""How a model family writes reasoning and tool calls: the description everyone reads.

The parsers, the forced-call grammar and the thinking-budget processor all read these
descriptions (the families themselves are in `families.catalog`), so the grammar that forces
a call and the parser that reads it cannot disagree about the syntax.

Reasoning (`ReasoningFormat`): ``start`` and ``end`` are the exact texts that open and close
the reasoning block; ``starts_in_reasoning`` says the model's template always opens the block
itself (deepseek_r1), so generation begins inside it.

Tool calls (`ToolCallFormat`). One call is written as::

    section_start? call_start NAME name_end ARGUMENTS args_end call_end (separator call...)*
    section_end?

* ``section_start`` / ``section_end``: literal texts around a block of calls ("" if none).
* ``call_start``: literal text before each call's name (or before the JSON object when the
  dialect is ``json_named``, where the name is a field inside the object).
* ``name_end``: literal text after the name ("" when the name simply ends where the arguments
  begin, e.g. gemma4 ``call:name{``). ``name_prefix`` is text inside the name position that
  is not part of the function name (kimi_k2 writes ``functions.NAME:0``).
* ``dialect``: how NAME and ARGUMENTS are written, read and forced (`families.dialects`:
  ``json``, ``json_named``, ``xml``, ``python``, ``gemma``).
* ``args_end``, ``call_end``: literal texts after the arguments; ``separator`` between calls.
* ``dropped``: control markers that are never content (answer wrappers, turn ends); they are
  removed wherever they appear in content (`tool_parsers.dropping`).
* ``prompt_opens``: the opening of the first call that the generation prompt itself writes
  (Functionary's ``>>>``): the output continues it (`tool_parsers.continued`).
* ``id_style``: the shape of call ids its templates expect (`families.call_ids`).
* ``whole_calls``: a call is reported only once its arguments are complete and valid, so a
  malformed call inside a calls section is dropped through its end marker (its siblings
  still read) in every chunking, and never half-streamed (Kimi K2).

Whitespace: a newline written in any literal above means "optional whitespace" when parsing,
and exactly that newline when generating. ``render_call`` writes one canonical call, which is
the text a constraint should force and what the parser reads back.

Harmony (gpt-oss) writes reasoning and calls as channels of one message stream; its
`Channels` are the markers of that stream, and its reasoning and tool-call formats are derived
from them (``channels`` set on both).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .call_ids import IdStyle
from .dialects import Dialect


@dataclass(frozen=True)
class Channels:
    """Harmony's message stream: ``start ROLE HEADER message BODY`` ended by ``end``,
    ``call`` or ``return_``. The header names the channel (``channel NAME``) and maybe a
    recipient (``recipient`` + ``functions`` + NAME for a tool call), maybe followed by
    ``constrain`` + ``json``."""

    start: str = "<|start|>"
    channel: str = "<|channel|>"
    message: str = "<|message|>"
    end: str = "<|end|>"
    call: str = "<|call|>"
    return_: str = "<|return|>"
    constrain: str = "<|constrain|>"
    recipient: str = "to="
    functions: str = "functions."
    reasoning_channel: str = "analysis"
    tool_channel: str = "commentary"

    @property
    def ends(self) -> tuple[str, str, str]:
        """The texts that end a message."""
        return self.end, self.call, self.return_


# The one family written as channels of a message stream (gpt-oss)
HARMONY = Channels()


@dataclass(frozen=True)
class ReasoningFormat:
    """The delimiters of a family's reasoning block."""

    name: str
    start: str
    end: str
    starts_in_reasoning: bool = False
    aliases: tuple[str, ...] = ()
    # texts that open a tool call: one met inside a block that never closes ends the
    # reasoning (used when no tool-call format says which; see `reasoning.delimited`)
    call_markers: tuple[str, ...] = ()
    channels: Channels | None = None  # Harmony: reasoning is a channel of its message stream
    # a word written right after ``start`` that names the block, not reasoning (Gemma 4's
    # ``<|channel>thought``); removed with the whitespace after it
    label: str = ""
    # other (start, end) pairs of the same family, recognised when the output opens with
    # them (Granite 3.2 writes "Here is my thought process:", Granite 3.3 ``<think>``)
    alternatives: tuple[tuple[str, str], ...] = ()
    # markers around the answer that are never content (Command-R's ``<|START_RESPONSE|>``,
    # Granite 3.3's ``<response>``)
    dropped: tuple[str, ...] = ()


@dataclass(frozen=True)
class ToolCallFormat:
    """The exact syntax of a family's tool calls (see the module docstring)."""

    name: str
    dialect: Dialect
    call_start: str
    call_end: str = ""
    name_end: str = ""
    args_end: str = ""
    section_start: str = ""
    section_end: str = ""
    separator: str = ""
    name_prefix: str = ""
    # a marker after the name that introduces the model's own call id (Mistral's
    # ``[CALL_ID]``), optional when parsing, never written
    call_id_marker: str = ""
    aliases: tuple[str, ...] = ()
    # Other openings of the same family, tried when this one does not match (mistral).
    variants: tuple[ToolCallFormat, ...] = field(default=(), compare=False)
    channels: Channels | None = None  # Harmony: calls are messages of its channel stream
    dropped: tuple[str, ...] = ()
    prompt_opens: str = ""
    # The shape of call ids the family's templates expect (`families.call_ids`).
    id_style: IdStyle = "openai"
    whole_calls: bool = False

    def render_call(self, name: str, arguments: dict, *, index: int = 0) -> str:
        """One call written exactly as this family writes it (without section markers)."""
        body = self.dialect.render(self, name, arguments, index)
        return self.call_start + body + self.args_end + self.call_end

    def render_calls(self, calls: list[tuple[str, dict]]) -> str:
        """A whole block of calls, section markers and separators included."""
        body = self.separator.join(
            self.render_call(name, args, index=i) for i, (name, args) in enumerate(calls)
        )
        return self.section_start + body + self.section_end
