"""The ``gemma`` dialect: gemma4's literals ``{key:<|"|>text<|"|>,n:1,flag:true,obj:{...}}``
right after the name. Members are converted to JSON one at a time; the grammar writes each
parameter in these literals, typed by its schema (``literal_grammar``)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any, ClassVar

from ..lark import LarkRules
from ..literal import partial_suffix, skip_space
from .base import ArgumentReader, Dialect, Layout, Status, Step
from .literal_grammar import LiteralGrammar, LiteralSyntax
from .members import MemberStream

GEMMA_QUOTE = '<|"|>'
_GEMMA_SYNTAX = re.compile(r"[{}\[\],]")  # what `GemmaArguments.feed` reacts to (with `<`)


class GemmaDialect(Dialect):
    name: ClassVar[str] = "gemma"
    object_arguments: ClassVar[bool] = True

    def reader(self, properties: dict[str, Any], named: bool = True) -> ArgumentReader:
        return GemmaArguments()

    def render_arguments(self, arguments: dict) -> str:
        return gemma_literal(arguments)

    def arguments_grammar(
        self, layout: Layout, rule: str, function: str, parameters: dict, g: LarkRules
    ) -> list[str]:
        quote = g.lit.items(GEMMA_QUOTE)
        # A special-token quote never matches text: any text up to it is exact.
        syntax = GEMMA_SPECIAL_SYNTAX if quote[0].startswith("<[") else GEMMA_SYNTAX
        members = LiteralGrammar(syntax, g, quote)
        return ['"{"', *members.members(rule, parameters, False), '"}"']


GEMMA = GemmaDialect()
# Strings between <|"|> markers (no "<" in them unless the marker is a special token); bare
# keys; no whitespace, as gemma4 writes them.
GEMMA_SYNTAX = LiteralSyntax(
    name="gemma",
    string=r"/[^<]*/",
    true="true",
    false="false",
    null="null",
    kwarg="{}:",
    keys=("{}",),
    colon=('":"',),
    separator=('","',),
    quoted=True,
)
GEMMA_SPECIAL_SYNTAX = replace(GEMMA_SYNTAX, string=r"/(.|\n)*/")


def gemma_literal(value: object) -> str:
    """A value in gemma4's tool-call literal syntax (strings quoted with ``<|"|>``)."""
    if isinstance(value, str):
        return GEMMA_QUOTE + value + GEMMA_QUOTE
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{gemma_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(gemma_literal(v) for v in value) + "]"
    return json.dumps(value)


class GemmaArguments(MemberStream):
    """gemma4's ``{key:<|"|>text<|"|>,n:1}`` object, converted to JSON member by member."""

    def __init__(self) -> None:
        super().__init__()
        self._depth = 0
        self._in_string = False

    def quick(self, text: str) -> str | None:
        """Text that can neither end a member nor open or close a string is only kept."""
        if "<" in text or not self._depth:
            return None
        if not self._in_string and _GEMMA_SYNTAX.search(text):
            return None
        self._raw.append(text)
        return ""

    def feed(self, text: str, final: bool) -> Step:
        out: list[str] = []
        i = start = 0
        if self._depth == 0:
            i = skip_space(text, 0)
            if i == len(text):
                return "", i, Status.MORE
            if text[i] != "{":
                return "", i, Status.FAIL
            self._depth, i = 1, i + 1
            start = i
        n = len(text)
        while i < n:
            if self._in_string:
                at = text.find(GEMMA_QUOTE, i)
                if at < 0:
                    return self._keep(text, start, n - partial_suffix(text[i:], [GEMMA_QUOTE]), out)
                self._in_string, i = False, at + len(GEMMA_QUOTE)
                continue
            if text.startswith(GEMMA_QUOTE, i):
                self._in_string, i = True, i + len(GEMMA_QUOTE)
                continue
            if GEMMA_QUOTE.startswith(text[i:]) and not final:
                return self._keep(text, start, i, out)
            c = text[i]
            if c in "{[":
                self._depth += 1
            elif c in "}]" and self._depth > 1:
                self._depth -= 1
            elif c in "}]" or (c == "," and self._depth == 1):
                if c == "]":
                    return self._fail(text, start, i, out)
                if not self._member(text, start, i, c == "}", out):
                    return "".join(out), i, Status.FAIL
                if c == "}":
                    return "".join(out), i + 1, Status.DONE
                start = i + 1
            i += 1
        return self._keep(text, start, n, out)

    def _keep(self, text: str, start: int, upto: int, out: list[str]) -> Step:
        self._raw.append(text[start:upto])
        return "".join(out), upto, Status.MORE

    def _empty_close_ok(self) -> bool:
        return not self._members  # `{}`, not `{a:1,}`

    def _read(self, source: str) -> dict | None:
        value = gemma_to_python("{" + source + "}")
        return value if isinstance(value, dict) else None


# Keys are bare or quoted (``{<|"|>3<|"|>:…}`` for a key that is not a name); numbers may end
# in a bare dot (``108.``), as Gemma 4 writes them.
_GEMMA_TOKEN = re.compile(
    r'\s*(?:<\|"\|>(?P<qkey>(?:(?!<\|"\|>).)*)<\|"\|>\s*:|(?P<str><\|"\|>(?P<body>.*?)<\|"\|>)'
    r"|(?P<key>[A-Za-z_][\w\-.]*)\s*:"
    r"|(?P<lit>true|false|null|-?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)|(?P<punct>[{}\[\],]))",
    re.DOTALL,
)


def gemma_to_python(source: str) -> object:
    """Translate gemma4 literal syntax into JSON text and decode it (None if invalid)."""
    parts: list[str] = []
    pos = 0
    source = source.strip()
    while pos < len(source):
        m = _GEMMA_TOKEN.match(source, pos)
        if m is None:
            return None
        pos = m.end()
        if m["qkey"] is not None:
            parts.append(json.dumps(m["qkey"], ensure_ascii=False) + ":")
        elif m["str"] is not None:
            parts.append(json.dumps(m["body"], ensure_ascii=False))
        elif m["key"] is not None:
            parts.append(json.dumps(m["key"]) + ":")
        elif m["lit"] is not None:
            lit = m["lit"]
            parts.append(
                lit.replace(".", ".0") if lit.endswith(".") or ".e" in lit.lower() else lit
            )
        else:
            parts.append(m["punct"])
    try:
        return json.loads("".join(parts))
    except ValueError:
        return None
