"""What an argument dialect is: how a call's name and arguments are read, forced and written.

A family's call is ``call_start NAME name_end ARGUMENTS args_end call_end`` (see
`families.formats`); the dialect owns everything from NAME to ARGUMENTS. One `Dialect`
object holds the three views of that syntax, so they cannot drift apart:

* reading: ``match_header`` decides the call's name, ``reader`` streams its arguments as
  JSON text (an `ArgumentReader`), ``closing`` is the literal text after them;
* writing: ``render`` writes a call the canonical way (what a constraint forces, what the
  parser reads back);
* forcing: ``grammar`` gives the Lark items of one call of one function (`families.lark`).

The base class is the common shape "name, ``name_end``, then the arguments"; a dialect
supplies its reader, ``render_arguments`` and ``arguments_grammar``. A dialect whose name lives
inside its arguments (``json_named``) overrides the header parts as well.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, ClassVar, Protocol

from ..lark import GrammarError, LarkRules, lark_string
from ..literal import Match, match_literal, match_name, skip_space

# kimi_k2 numbers its calls (functions.NAME:0); the grammar allows this many digits.
MAX_CALL_INDEX_DIGITS = 3
_INDEXED_NAME = re.compile(r".*[^:]:\d+|\d+")


class Status(Enum):
    MORE = "more"
    DONE = "done"
    FAIL = "fail"


Step = tuple[str, int, Status]  # (final JSON text, characters consumed, status)


class ArgumentReader(Protocol):
    """Incremental reader of one call's arguments.

    ``feed`` is given the undecided text and answers ``(json_text, consumed, status)``:
    ``json_text`` is argument JSON that is now final, ``consumed`` how many characters it used
    up (the rest is fed again next time), ``status`` whether the arguments are complete.
    ``quick`` answers a feed that only extends the arguments (None: ``feed`` must run).
    """

    @property
    def streams(self) -> bool:
        """The call is reported before its arguments are complete."""
        ...

    @property
    def settles(self) -> str | None:
        """The characters that can settle held markup (None: any character may)."""
        ...

    @property
    def name(self) -> str:
        """The function name, when the arguments name it (json_named written name last)."""
        ...

    @property
    def unread(self) -> str:
        """Text consumed but not released as arguments (content again if the call fails)."""
        ...

    def quick(self, text: str) -> str | None: ...

    def feed(self, text: str, final: bool) -> Step: ...

    def close(self) -> str:
        """The JSON text that ends what was released validly (a call cut off or failed
        after it was reported)."""
        ...


class Layout(Protocol):
    """The literal texts of a family's call around its name and arguments (a
    `ToolCallFormat` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def call_start(self) -> str: ...
    @property
    def name_prefix(self) -> str: ...
    @property
    def name_end(self) -> str: ...
    @property
    def call_id_marker(self) -> str: ...
    @property
    def args_end(self) -> str: ...
    @property
    def call_end(self) -> str: ...


class Dialect:
    """One argument syntax (see the module docstring)."""

    name: ClassVar[str]
    # The arguments are one ``{...}`` object: a call is decided only once its ``{`` is seen.
    object_arguments: ClassVar[bool] = False
    # Literal text right after ``call_start`` that belongs to the dialect (part of the text
    # that starts holding a possible call back).
    lead: ClassVar[str] = ""
    # Whether `arguments_grammar` can force this syntax.
    has_grammar: ClassVar[bool] = True

    # -- reading ---------------------------------------------------------------------------
    def reader(self, properties: dict[str, Any], named: bool = True) -> ArgumentReader:
        """A fresh reader for one call; ``properties`` are the function's parameter schemas;
        ``named`` False: `match_header` found the arguments before the name."""
        raise NotImplementedError

    def match_header(
        self, layout: Layout, text: str, pos: int, final: bool
    ) -> tuple[Match, int, str | None]:
        """Match the name and what precedes the arguments at ``text[pos:]``: (state, where
        the arguments begin, name; None when the arguments come first and name the call)."""
        if layout.name_prefix:  # kimi_k2: `functions.NAME:N`, maybe after a space
            pos = skip_space(text, pos)
        state, end = match_name(text, pos, final)
        if state is not Match.MATCH:
            return state, end, ""
        name = text[pos:end]
        if layout.name_prefix and not _INDEXED_NAME.fullmatch(name):
            return Match.FAIL, end, ""  # neither `NAME:N` nor a bare `N`: malformed
        if layout.call_id_marker:  # NAME [CALL_ID] ID name_end
            state, at = match_literal(text, end, layout.call_id_marker, final)
            if state is Match.PARTIAL:
                return state, at, ""
            if state is Match.MATCH:
                state, end = match_name(text, at, final)
                if state is not Match.MATCH:
                    return state, end, ""
        state, end = match_literal(text, end, layout.name_end, final)
        if state is not Match.MATCH:
            return state, end, ""
        if self.object_arguments:
            return expect_object(text, end, final, name)
        return Match.MATCH, end, name

    def call_id(self, header: str) -> str | None:
        """The id the model wrote in a matched call ``header`` (None: the server makes one)."""
        return None

    def header_end(self, layout: Layout) -> str:
        """The literal text a call header ends with (an argument object's ``{`` counts)."""
        return "{" if self.object_arguments else layout.name_end

    def extra_members(self, text: str, final: bool) -> tuple[Match, int]:
        """Skip what may follow the arguments before the closing (json_named: other keys
        of the call object); MATCH with where the closing begins."""
        return Match.MATCH, 0

    def closing(self, layout: Layout, named: bool = True) -> str:
        """The literal text after a call's arguments."""
        return layout.args_end + layout.call_end

    # -- writing ---------------------------------------------------------------------------
    def render(self, layout: Layout, name: str, arguments: dict, index: int) -> str:
        """The name and arguments of one call, written as the family writes them."""
        return _head(layout, name, index) + self.render_arguments(arguments)

    def render_arguments(self, arguments: dict) -> str:
        raise NotImplementedError

    # -- forcing ---------------------------------------------------------------------------
    def grammar(
        self, layout: Layout, rule: str, function: str, parameters: dict, g: LarkRules
    ) -> list[str]:
        """Lark items for one whole call of ``function`` (``rule`` prefixes helper rules)."""
        lit = g.lit
        head = [*lit.seq(layout.call_start, layout.name_prefix), lark_string(function)]
        if layout.name_prefix:
            head += ['":"', f"/[0-9]{{1,{MAX_CALL_INDEX_DIGITS}}}/"]
        head += lit.items(layout.name_end)
        args = self.arguments_grammar(layout, rule, function, parameters, g)
        return [*head, *args, *lit.seq(layout.args_end, layout.call_end)]

    def arguments_grammar(
        self, layout: Layout, rule: str, function: str, parameters: dict, g: LarkRules
    ) -> list[str]:
        raise GrammarError(f"the {self.name!r} argument syntax has no grammar")


def _head(layout: Layout, name: str, index: int) -> str:
    """``name_prefix NAME[:index] name_end`` (kimi_k2 numbers its calls)."""
    head = f"{layout.name_prefix}{name}{':' + str(index) if layout.name_prefix else ''}"
    return head + layout.name_end


def expect_object(text: str, pos: int, final: bool, name: str) -> tuple[Match, int, str]:
    """A JSON-ish argument object must follow: decide the call only once ``{`` is seen."""
    at = skip_space(text, pos)
    if at == len(text):
        return (Match.FAIL if final else Match.PARTIAL), at, ""
    return (Match.MATCH if text[at] == "{" else Match.FAIL), pos, name
