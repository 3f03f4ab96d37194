"""The ``json_keyed`` dialect: one JSON object per call whose keys a family names itself,
``{"tool_call_id": "0", "tool_name": NAME, "parameters": {...}}`` (Command-R / R7B / A).

Like ``json_named`` the call is decided on the name member and its arguments stream as they
arrive; the object may start with the model's own call id (kept as the call's id), may use
the ``name``/``arguments`` keys instead, and may leave the arguments out (``{}``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from ..lark import LarkRules, hoisted, json_value, without_defs
from ..literal import MAX_NAME, Match, match_literal, skip_space
from .base import ArgumentReader, Layout, Status, Step, expect_object
from .json_arguments import JsonArguments
from .json_named import JsonNamed

_JSON_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"', re.DOTALL)


class OptionalObject(JsonArguments):
    """A JSON object, or nothing when the call's object closes at once (``{}``)."""

    def feed(self, text: str, final: bool) -> Step:
        if not self._stack:
            at = skip_space(text, 0)
            if at < len(text) and text[at] == "}":
                return "{}", at, Status.DONE
        return super().feed(text, final)


@dataclass(frozen=True)
class JsonKeyed(JsonNamed):
    """``{"<id_key>": ID?, "<name_key>": NAME, "<arguments_key>": {...}?}``."""

    arguments_key: str = "parameters"
    name_key: str = "tool_name"
    id_key: str = "tool_call_id"

    name: ClassVar[str] = "json_keyed"

    def keys(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.arguments_key, "arguments", "parameters")))

    def name_keys(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.name_key, "name")))

    # -- reading ---------------------------------------------------------------------------
    def reader(self, properties: dict[str, Any], named: bool = True) -> ArgumentReader:
        return OptionalObject()

    def match_header(
        self, layout: Layout, text: str, pos: int, final: bool
    ) -> tuple[Match, int, str | None]:
        state, pos = match_literal(text, pos, "{\n", final)
        if state is not Match.MATCH:
            return state, pos, ""
        state, end = match_literal(text, pos, f'"{self.id_key}"\n:\n', final)
        if state is Match.PARTIAL:
            return state, end, ""
        if state is Match.MATCH:
            state, end, _ = self._string(text, end, final)
            if state is not Match.MATCH:
                return state, end, ""
            state, pos = match_literal(text, end, "\n,\n", final)
            if state is not Match.MATCH:
                return state, pos, ""
        for key in self.name_keys():
            state, end = match_literal(text, pos, f'"{key}"\n:\n', final)
            if state is not Match.FAIL:
                break
        if state is not Match.MATCH:
            return state, end, ""
        state, end, name = self._string(text, end, final)
        if state is not Match.MATCH:
            return state, end, ""
        for key in self.keys():
            state, after = match_literal(text, end, f'\n,\n"{key}"\n:\n', final)
            if state is Match.MATCH:
                return expect_object(text, after, final, name)
            if state is Match.PARTIAL:
                return state, after, ""
        state, after = match_literal(text, end, "\n}", final)
        if state is Match.MATCH:
            return Match.MATCH, skip_space(text, end), name
        return state, after, ""

    @staticmethod
    def _string(text: str, pos: int, final: bool) -> tuple[Match, int, str]:
        """A JSON string at ``text[pos]``: (state, its end, its value)."""
        m = _JSON_STRING.match(text, pos)
        if m is None:
            undecided = text[pos:] == "" or (text[pos] == '"' and len(text) - pos < MAX_NAME)
            return (Match.PARTIAL if undecided and not final else Match.FAIL), pos, ""
        return Match.MATCH, m.end(), json.loads(m.group(0))

    def call_id(self, header: str) -> str | None:
        m = re.search(rf'"{re.escape(self.id_key)}"\s*:\s*("(?:[^"\\]|\\.)*")', header)
        return json.loads(m.group(1)) if m else None

    # -- writing ---------------------------------------------------------------------------
    def render(self, layout: Layout, name: str, arguments: dict, index: int) -> str:
        call = {self.id_key: str(index), self.name_key: name, self.arguments_key: arguments}
        return json.dumps(call, ensure_ascii=False)

    # -- forcing ---------------------------------------------------------------------------
    def grammar(
        self, layout: Layout, rule: str, function: str, parameters: dict, g: LarkRules
    ) -> list[str]:
        wrapper = hoisted(
            {
                "type": "object",
                "properties": {
                    self.id_key: {"type": "string", "pattern": "^[0-9]{1,3}$"},
                    self.name_key: {"const": function},
                    self.arguments_key: without_defs(parameters),
                },
                "required": [self.id_key, self.name_key, self.arguments_key],
                "additionalProperties": False,
            },
            parameters,
        )
        return [
            *g.lit.seq(layout.call_start),
            json_value(wrapper, g.json_options),
            *g.lit.seq(layout.args_end, layout.call_end),
        ]
