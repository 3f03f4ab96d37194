"""OpenAI custom (free-form) tools, whatever surface they came through.

A custom tool takes one text ``input`` instead of JSON arguments. The model sees it through
its family's tool format as a function of one string argument, ``input``; its calls are
parsed as calls of that function, and surfaces report them as custom calls. A tool's
``format`` may give a grammar (Lark or regex) the input must match:

* forced (``tool_choice`` names it, or ``required`` with it as the only tool) with a grammar:
  the answer after any reasoning is the raw input, constrained by the grammar token by token,
  and it is wrapped as the call (`RawCallStream`): a JSON-string slot in the family's syntax
  cannot carry a Lark grammar (its text would have to be JSON-escaped), the raw input can;
* forced without a grammar, or ``required`` among several tools: the family's forced-call
  grammar with ``input`` a free string;
* otherwise (``auto``, or ``required`` among several): the parsed input is checked against
  the grammar after generation (`input_mismatch`), and a mismatch is reported, never hidden.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from vllm_mlx.families.message import ParsedMessage

from ..protocols import Tokenizer
from .errors import ConstraintError
from .kinds import grammar_constraint, text_mismatch
from .spec import Constraint

CUSTOM_INPUT = "input"
PARAMETERS = {
    "type": "object",
    "properties": {CUSTOM_INPUT: {"type": "string", "description": "the raw input text"}},
    "required": [CUSTOM_INPUT],
}
Syntax = Literal["text", "lark", "regex"]


@dataclass(frozen=True)
class CustomTool:
    """One custom tool: ``syntax`` text (free) or the grammar's, and ``field`` the request
    field holding the grammar, which a 400 about it names."""

    name: str
    syntax: Syntax = "text"
    definition: str | None = None
    field: str = "tools"

    @property
    def grammar(self) -> Constraint | None:
        if self.syntax == "text":
            return None
        return Constraint(self.syntax, self.definition, self.field)


def from_format(name: str, fmt: Any, param: str) -> CustomTool:
    """A custom tool from OpenAI's ``format`` at ``param``: absent, ``{}`` or ``{"type":
    "text"}``; or a grammar, flat as Responses writes it (``{"type": "grammar", "syntax",
    "definition"}``) or nested as chat does (``{"type": "grammar", "grammar": {...}}``).
    ConstraintError naming the field at fault otherwise."""
    if fmt is None or fmt == {}:
        return CustomTool(name, field=param)
    if not isinstance(fmt, dict):
        raise ConstraintError("format must be an object", param)
    kind = fmt.get("type")
    if kind == "text":
        return CustomTool(name, field=param)
    if kind != "grammar":
        raise ConstraintError(
            f'unsupported custom tool format type {kind!r}; valid: "text", "grammar"',
            f"{param}.type",
        )
    nested = fmt.get("grammar")
    spec, where = (nested, f"{param}.grammar") if isinstance(nested, dict) else (fmt, param)
    syntax = spec.get("syntax")
    if syntax not in ("lark", "regex"):
        raise ConstraintError(
            f'unsupported grammar syntax {syntax!r}; valid: "lark", "regex"', f"{where}.syntax"
        )
    definition = spec.get("definition")
    if not isinstance(definition, str) or not definition:
        raise ConstraintError(
            "the grammar definition must be a non-empty string", f"{where}.definition"
        )
    return CustomTool(name, syntax, definition, f"{where}.definition")


def function_form(tool: CustomTool, description: str | None) -> dict:
    """The chat-form function the model sees for a custom tool; a grammar is shown in the
    description, so an unforced call can follow it too."""
    about = f"{(description or '').strip()} Its one argument, input, is the raw text it takes."
    if tool.grammar is not None:
        about += f" The input must match this {tool.syntax} grammar:\n{tool.definition}"
    return {
        "type": "function",
        "function": {"name": tool.name, "description": about.strip(), "parameters": PARAMETERS},
    }


def arguments_of(text: str) -> str:
    """The function-form arguments carrying a custom call's input."""
    return json.dumps({CUSTOM_INPUT: text}, ensure_ascii=False)


def input_of(arguments: str) -> str:
    """A custom call's ``input`` from its JSON arguments (the raw text when they are not
    the one-string object)."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return arguments
    value = parsed.get(CUSTOM_INPUT) if isinstance(parsed, dict) else None
    return value if isinstance(value, str) else arguments


def check_grammars(tokenizer: Tokenizer, tools: list[CustomTool]) -> None:
    """Every grammar compiles (ConstraintError naming the tool's field otherwise)."""
    for tool in tools:
        if tool.definition is not None and tool.syntax != "text":
            grammar_constraint(tokenizer, tool.syntax, tool.definition, field=tool.field)


def forced_raw(
    tool_choice: Any, tools: list[dict] | None, custom: list[CustomTool]
) -> CustomTool | None:
    """The custom tool whose raw input is the whole answer: the forced call is of it, it
    has a grammar, and no other tool could be called instead."""
    by_name = {t.name: t for t in custom if t.grammar is not None}
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name")
        return by_name.get(name) if isinstance(name, str) else None
    if tool_choice == "required" and tools and len(tools) == 1:
        return by_name.get(tools[0].get("function", {}).get("name"))
    return None


def input_mismatch(
    tokenizer: Tokenizer, message: ParsedMessage, custom: list[CustomTool]
) -> str | None:
    """Why a parsed call of a grammar tool does not match its grammar (None: all match)."""
    grammars = {t.name: t for t in custom if t.grammar is not None}
    for call in message.tool_calls:
        tool = grammars.get(call.name)
        if tool is None or tool.grammar is None:
            continue
        why = text_mismatch(tokenizer, tool.grammar, input_of(call.arguments))
        if why is not None:
            return (
                f"{tool.field} ({tool.name}): the call's input does not match the grammar, "
                f"which is checked, not enforced, unless the call is forced: {why}"
            )
    return None


_HEAD = re.compile(r'\s*\{\s*"' + CUSTOM_INPUT + r'"\s*:\s*"')
_PLAIN = re.compile(r'[^"\\]+')
_HEAD_WAIT = 64  # characters of arguments to wait for the head in before giving up streaming


class InputDeltas:
    """A custom call's input as it streams: the JSON arguments' pieces in, the input text
    they add out (escapes decoded once whole). Arguments of another shape stream nothing;
    the whole input is still known at the end (`input_of`)."""

    def __init__(self) -> None:
        self._buf = ""
        self._in_body = False
        self._over = False
        self._arguments: list[str] = []
        self._sent: list[str] = []

    def rest(self) -> str:
        """At the call's end: the input not streamed yet (all of it, for arguments of
        another shape), so the deltas add up to the whole input whenever they can."""
        whole, sent = input_of("".join(self._arguments)), "".join(self._sent)
        return whole[len(sent) :] if whole.startswith(sent) else ""

    def feed(self, piece: str) -> str:
        self._arguments.append(piece)
        text = self._decode(piece)
        self._sent.append(text)
        return text

    def _decode(self, piece: str) -> str:
        if self._over:
            return ""
        self._buf += piece
        if not self._in_body:
            head = _HEAD.match(self._buf)
            if head is None:
                self._over = len(self._buf) > _HEAD_WAIT
                return ""
            self._buf, self._in_body = self._buf[head.end() :], True
        out, buf, i = [], self._buf, 0
        while i < len(buf):
            plain = _PLAIN.match(buf, i)
            if plain:
                out.append(plain.group())
                i = plain.end()
                continue
            if buf[i] == '"':  # the string ends: so does the input
                self._over = True
                break
            size = _escape_size(buf, i)
            if size is None:
                break  # an escape not yet whole
            try:
                out.append(json.loads(f'"{buf[i : i + size]}"'))
            except ValueError:
                self._over = True
                break
            i += size
        self._buf = buf[i:]
        return "".join(out)


def _escape_size(text: str, i: int) -> int | None:
    """Characters of the escape at ``text[i]`` (a surrogate pair counts whole); None when
    the text ends inside it."""
    if i + 1 >= len(text):
        return None
    if text[i + 1] != "u":
        return 2
    if i + 6 > len(text):
        return None
    if text[i + 2 : i + 4].lower() in ("d8", "d9", "da", "db"):  # a high surrogate
        return 12 if i + 12 <= len(text) else None
    return 6
