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
_SCALAR = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null")
_KEY, _COLON, _VALUE, _COMMA = "key", "colon", "value", "comma"  # what comes next
_LITERAL_ENDS = frozenset(' \t\r\n,:]}"{[')


class JsonArguments:
    """Streams a JSON object verbatim, releasing only text after which the object can still
    be closed validly (`close`): a number or literal is held until it ends (and must be
    JSON: ``NaN``, ``Infinity``, ``True``, ``None`` fail), a comma and a key until the next
    value begins. Nothing is released before the first value begins, so an object that is
    malformed from the start is never reported as a call.
    """

    streams = False  # reported with the first released text (see above)
    settles = None  # held text (a number, literal, key) may be settled by any character
    unread = ""  # everything consumed is released
    name = ""

    def __init__(self) -> None:
        self._stack: list[str] = []
        self._in_string = False
        self._escape = False
        self._expect = _VALUE
        self._started = False  # the first value has begun: text may be released
        self._fresh = False  # right after an opening bracket (it may close empty)

    def quick(self, text: str) -> str | None:
        """The JSON text of a feed that neither ends the object nor holds text back (the
        reader is left as it was otherwise)."""
        if (
            self._in_string
            and self._started
            and not self._escape
            and '"' not in text
            and "\\" not in text
        ):
            return text  # inside a string that neither ends nor escapes
        saved, fresh = self._state(), self._fresh
        piece, used, status = self.feed(text, False)
        if status is Status.MORE and used == len(text):
            return piece
        self._restore(saved)
        self._fresh = fresh
        return None

    def close(self) -> str:
        """The text that ends the released JSON validly (a cut-off or failed call)."""
        if not self._started:
            return ""
        tail = '"' if self._in_string else ""
        return tail + "".join("}" if c == "{" else "]" for c in reversed(self._stack))

    def feed(self, text: str, final: bool) -> Step:
        i = start = 0
        if not self._stack:
            i = start = skip_space(text, 0)
            if i == len(text):
                return "", i, Status.MORE
            if text[i] != "{":
                return "", i, Status.FAIL
        # `hold`: where released text must stop, `saved` the state to resume from there
        hold = -1 if self._started else start
        saved = self._state()
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
                    self._expect = _COLON if self._expect == _KEY else _COMMA
                else:
                    m = _STRING_BODY.match(text, i)
                    i = m.end() if m else i + 1
                    continue
                i += 1
                continue
            if literal_at >= 0:
                if c not in _LITERAL_ENDS:
                    i += 1
                    continue
                if not _SCALAR.fullmatch(text, literal_at, i):
                    return self._fail(text, start, hold, literal_at, saved)
                literal_at, hold, self._started = -1, -1, True
            fresh, self._fresh = self._fresh, False
            if c in " \t\r\n":
                self._fresh = fresh
            elif c == '"':
                if self._expect == _KEY:
                    if hold < 0:
                        hold, saved = i, self._state()
                elif self._expect == _VALUE:
                    hold, self._started = -1, True
                else:
                    return self._fail(text, start, hold, i, saved)
                self._in_string = True
            elif c in "{[":
                if self._expect != _VALUE:
                    return self._fail(text, start, hold, i, saved)
                if self._stack:
                    hold, self._started = -1, True
                self._stack.append(c)
                self._expect, self._fresh = (_KEY if c == "{" else _VALUE), True
            elif c in "}]":
                if not (self._expect == _COMMA or fresh) or self._stack[-1] != _CLOSERS[c]:
                    return self._fail(text, start, hold, i, saved)
                self._stack.pop()
                self._expect = _COMMA
                if not self._stack:
                    self._started = True
                    return text[start : i + 1], i + 1, Status.DONE
                if not self._started:
                    hold, self._started = -1, True
            elif c == ":":
                if self._expect != _COLON:
                    return self._fail(text, start, hold, i, saved)
                self._expect = _VALUE
            elif c == ",":
                if self._expect != _COMMA:
                    return self._fail(text, start, hold, i, saved)
                if hold < 0:
                    hold, saved = i, self._state()
                self._expect = _KEY if self._stack[-1] == "{" else _VALUE
            else:  # a number or literal begins: held until it ends
                if self._expect != _VALUE:
                    return self._fail(text, start, hold, i, saved)
                if hold < 0:
                    hold, saved = i, self._state()
                literal_at, self._expect = i, _COMMA
            i += 1
        if literal_at >= 0 and final:
            if not _SCALAR.fullmatch(text, literal_at, n):
                return self._fail(text, start, hold, literal_at, saved)
            hold, self._started = -1, True
        if hold < 0:
            return text[start:n], n, Status.MORE
        self._restore(saved)
        return text[start:hold], hold, Status.MORE

    def _state(self) -> tuple:
        return self._stack[:], self._in_string, self._escape, self._expect, self._started

    def _restore(self, saved: tuple) -> None:
        stack, self._in_string, self._escape, self._expect, self._started = saved
        self._stack = stack[:]
        self._fresh = False

    def _fail(self, text: str, start: int, hold: int, at: int, saved: tuple) -> Step:
        """Invalid JSON at ``at``: release what was valid (up to a held point)."""
        if hold >= 0:
            self._restore(saved)
            return text[start:hold], hold, Status.FAIL
        return text[start:at], at, Status.FAIL


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
