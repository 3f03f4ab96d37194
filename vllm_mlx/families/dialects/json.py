"""The ``json`` dialect: the arguments are one JSON object after the name (hermes-style
families keep the name inside the object: see `json_named`).

Reading streams the object verbatim, holding back only a number or literal until it ends;
writing is ``json.dumps``; the grammar is the function's parameter schema as ``%json``.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

from ..lark import LarkRules, json_value
from ..literal import skip_space
from .base import ArgumentReader, Dialect, Layout, Status, Step

_STRING_BODY = re.compile(r'[^"\\]+')
_CLOSERS = {"}": "{", "]": "["}


class JsonArguments:
    """Streams a JSON object verbatim; a number or literal is held until it ends."""

    streams = True
    settles = None  # held text (a number or literal) may end on any character
    unread = ""  # everything consumed is released
    name = ""

    def __init__(self) -> None:
        self._stack: list[str] = []
        self._in_string = False
        self._escape = False

    def quick(self, text: str) -> str | None:
        """The JSON text of a feed that neither ends the object nor holds a literal back
        (the reader is left as it was otherwise)."""
        if self._in_string and not self._escape and '"' not in text and "\\" not in text:
            return text  # inside a string that neither ends nor escapes
        saved = self._stack[:], self._in_string, self._escape
        piece, used, status = self.feed(text, False)
        if status is Status.MORE and used == len(text):
            return piece
        self._stack, self._in_string, self._escape = saved
        return None

    def feed(self, text: str, final: bool) -> Step:
        i = start = 0
        if not self._stack:
            i = start = skip_space(text, 0)
            if i == len(text):
                return "", i, Status.MORE
            if text[i] != "{":
                return "", i, Status.FAIL
        literal_at = -1
        n = len(text)
        while i < n:
            c = text[i]
            if self._in_string:
                if self._escape:
                    self._escape = False
                elif c == "\\":
                    self._escape = True
                elif c == '"':
                    self._in_string = False
                else:
                    m = _STRING_BODY.match(text, i)
                    i = m.end() if m else i + 1
                    continue
            elif c == '"':
                literal_at = -1
                self._in_string = True
            elif c in "{[":
                literal_at = -1
                self._stack.append(c)
            elif c in "}]":
                literal_at = -1
                if not self._stack or self._stack.pop() != _CLOSERS[c]:
                    return text[start:i], i, Status.FAIL
                if not self._stack:
                    return text[start : i + 1], i + 1, Status.DONE
            elif c in " \t\r\n,:":
                literal_at = -1
            elif literal_at < 0:
                literal_at = i
            i += 1
        end = literal_at if literal_at >= 0 and not final else n
        return text[start:end], end, Status.MORE


class JsonDialect(Dialect):
    """``NAME name_end {...}`` (deepseek, kimi_k2, mistral's ``[ARGS]``, harmony)."""

    name: ClassVar[str] = "json"
    object_arguments: ClassVar[bool] = True

    def reader(self, properties: dict[str, Any], named: bool = True) -> ArgumentReader:
        return JsonArguments()

    def render_arguments(self, arguments: dict) -> str:
        return json.dumps(arguments, ensure_ascii=False)

    def arguments_grammar(
        self, layout: Layout, rule: str, function: str, parameters: dict, g: LarkRules
    ) -> list[str]:
        return [json_value(parameters, g.json_options)]


JSON = JsonDialect()
