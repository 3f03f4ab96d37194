"""The ``json_named`` dialect: one JSON object holds both the name and the arguments,
``{"name": NAME, "<arguments_key>": {...}}`` (hermes, llama3_json, mistral, granite).

The call is decided on the ``"name"`` member and its arguments stream as they arrive. An
object written arguments-first (``{"arguments": {...}, "name": ...}``) is held whole and
read once it closes (`NameLastObject`); it stays content unless it names a function.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from ..lark import LarkRules, hoisted, json_value, without_defs
from ..literal import MAX_NAME, Match, match_literal, skip_space
from .base import ArgumentReader, Dialect, Layout, Status, Step, expect_object
from .json_arguments import JsonArguments

_JSON_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"', re.DOTALL)
_DECODER = json.JSONDecoder()


class NameLastObject:
    """A ``json_named`` call written with its arguments before its name: the whole object is
    held until it closes, then read (it stays content unless it names a function)."""

    streams = False
    settles = None
    unread = ""  # reported only once the whole object is read
    name = ""

    def __init__(self, arguments_keys: tuple[str, ...]) -> None:
        self._scan = JsonArguments()
        self._raw: list[str] = []
        self._keys = arguments_keys
        self.name = ""

    def quick(self, text: str) -> str | None:
        if self._scan.quick(text) is None:
            return None
        self._raw.append(text)
        return ""

    def close(self) -> str:
        return ""  # nothing is released before the object is read whole

    def feed(self, text: str, final: bool) -> Step:
        _, used, status = self._scan.feed(text, final)
        self._raw.append(text[:used])
        if status is not Status.DONE:
            return "", used, status
        try:
            obj = json.loads("".join(self._raw))
        except ValueError:
            return "", used, Status.FAIL
        name = obj.get("name")
        args = next((obj[k] for k in self._keys if k in obj), None)
        if not isinstance(name, str) or not name or not isinstance(args, dict):
            return "", used, Status.FAIL
        self.name = name
        return json.dumps(args, ensure_ascii=False), used, Status.DONE


class EncodedArguments:
    """Arguments written as a JSON string holding the object (``"arguments": "{\\"a\\": 1}"``,
    Granite 4): held until the string ends, then decoded; anything but an object fails."""

    streams = False
    settles = '"'
    unread = ""
    name = ""

    def __init__(self) -> None:
        self._raw: list[str] = []

    def quick(self, text: str) -> str | None:
        return None

    def close(self) -> str:
        return ""

    def feed(self, text: str, final: bool) -> Step:
        source = "".join(self._raw) + text
        m = _JSON_STRING.match(source, skip_space(source, 0))
        if m is None:
            self._raw.append(text)
            status = Status.FAIL if final else Status.MORE
            return "", len(text), status
        used = m.end() - (len(source) - len(text))
        try:
            value = json.loads(json.loads(m.group(0)))
        except ValueError:
            return "", used, Status.FAIL
        if not isinstance(value, dict):
            return "", used, Status.FAIL
        return json.dumps(value, ensure_ascii=False), used, Status.DONE


class NamedArguments:
    """The arguments of a named call: an object (streamed) or a JSON string holding one."""

    def __init__(self) -> None:
        self._reader: ArgumentReader | None = None

    def _pick(self, text: str) -> ArgumentReader | None:
        if self._reader is None:
            at = skip_space(text, 0)
            if at < len(text):
                self._reader = EncodedArguments() if text[at] == '"' else JsonArguments()
        return self._reader

    @property
    def streams(self) -> bool:
        return False  # JsonArguments reports the call with its first released text

    @property
    def settles(self) -> str | None:
        return None if self._reader is None else self._reader.settles

    @property
    def unread(self) -> str:
        return "" if self._reader is None else self._reader.unread

    @property
    def name(self) -> str:
        return ""

    def quick(self, text: str) -> str | None:
        reader = self._pick(text)
        return None if reader is None else reader.quick(text)

    def close(self) -> str:
        return "" if self._reader is None else self._reader.close()

    def feed(self, text: str, final: bool) -> Step:
        reader = self._pick(text)
        if reader is None:
            return "", 0, Status.FAIL if final else Status.MORE
        return reader.feed(text, final)


@dataclass(frozen=True)
class JsonNamed(Dialect):
    """``{"name": NAME, "<arguments_key>": {...}}`` right after ``call_start``."""

    arguments_key: str = "arguments"

    name: ClassVar[str] = "json_named"
    object_arguments: ClassVar[bool] = True
    lead: ClassVar[str] = "{"

    def keys(self) -> tuple[str, ...]:
        """The keys an object may hold its arguments under (its own first)."""
        return tuple(dict.fromkeys((self.arguments_key, "arguments", "parameters")))

    # -- reading ---------------------------------------------------------------------------
    def reader(self, properties: dict[str, Any], named: bool = True) -> ArgumentReader:
        return NamedArguments() if named else NameLastObject(self.keys())

    def match_header(
        self, layout: Layout, text: str, pos: int, final: bool
    ) -> tuple[Match, int, str | None]:
        start = pos
        state, pos = match_literal(text, start, '{\n"name"\n:\n', final)
        if state is Match.FAIL:
            return self._arguments_first(text, start, final)
        if state is not Match.MATCH:
            return state, pos, ""
        m = _JSON_STRING.match(text, pos)
        if m is None:
            undecided = text[pos:] == "" or (text[pos] == '"' and len(text) - pos < MAX_NAME)
            return (Match.PARTIAL if undecided and not final else Match.FAIL), pos, ""
        name = json.loads(m.group(0))
        for key in self.keys():
            state, end = match_literal(text, m.end(), f'\n,\n"{key}"\n:\n', final)
            if state is not Match.FAIL:
                break
        if state is not Match.MATCH:
            return state, end, ""
        at = skip_space(text, end)
        if at < len(text) and text[at] == '"':  # arguments as a JSON string
            return Match.MATCH, end, name
        return expect_object(text, end, final, name)

    def _arguments_first(self, text: str, start: int, final: bool):
        """An object whose first key holds the arguments: a call whose name comes later
        (MATCH with name None at the object's ``{``)."""
        result = Match.FAIL, start
        for key in self.keys():
            state, end = match_literal(text, start, f'{{\n"{key}"\n:\n', final)
            if state is Match.MATCH:
                return Match.MATCH, start, None
            if state is Match.PARTIAL:
                result = Match.PARTIAL, end
        return (*result, "")

    def extra_members(self, text: str, final: bool) -> tuple[Match, int]:
        """Keys after the arguments (Mistral Nemo's ``"id"``): ``, "key": value`` ..."""
        pos = 0
        while True:
            state, at = match_literal(text, pos, '\n,\n"', final)
            if state is not Match.MATCH:
                return (Match.MATCH, pos) if state is Match.FAIL else (state, pos)
            m = _JSON_STRING.match(text, at - 1)
            state, at = (
                (Match.FAIL, at) if m is None else match_literal(text, m.end(), "\n:\n", final)
            )
            if state is not Match.MATCH:
                return (Match.PARTIAL if m is None and not final else state), pos
            try:
                _, end = _DECODER.raw_decode(text, at)
            except ValueError:
                return (Match.FAIL if final else Match.PARTIAL), pos
            if end == len(text) and not final:
                return Match.PARTIAL, pos  # a number may continue
            pos = end

    def closing(self, layout: Layout, named: bool = True) -> str:
        """After the arguments object: the wrapper's ``}`` (read by `NameLastObject` itself
        when the name came last), then the family's closing markers."""
        return ("\n}" if named else "") + layout.args_end + layout.call_end

    # -- writing ---------------------------------------------------------------------------
    def render(self, layout: Layout, name: str, arguments: dict, index: int) -> str:
        return json.dumps({"name": name, self.arguments_key: arguments}, ensure_ascii=False)

    # -- forcing ---------------------------------------------------------------------------
    def grammar(
        self, layout: Layout, rule: str, function: str, parameters: dict, g: LarkRules
    ) -> list[str]:
        wrapper = hoisted(
            {
                "type": "object",
                "properties": {
                    "name": {"const": function},
                    self.arguments_key: without_defs(parameters),
                },
                "required": ["name", self.arguments_key],
                "additionalProperties": False,
            },
            parameters,
        )
        return [
            *g.lit.seq(layout.call_start),
            json_value(wrapper, g.json_options),
            *g.lit.seq(layout.args_end, layout.call_end),
        ]


JSON_NAMED = JsonNamed()
