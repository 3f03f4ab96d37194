"""The ``xml`` dialect: parameters as ``KEY_START key KEY_END VALUE_START value VALUE_END``
(qwen3_coder, glm45, minimax_m2); one `Xml` object per family holds its four literals.

A value is raw text (no escaping): a parameter declared ``string`` in the tool's JSON schema
(or not declared) is kept verbatim, other declared types are JSON literals
(`families.value_types`). One newline right inside a value's tags is layout, not value: the
rules for it are derived once here (`Xml.key_close` ... `Xml.trail_newline`) and read by the
parser, the grammar and the writer alike.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from json.encoder import encode_basestring  # json.dumps(s, ensure_ascii=False) for a str
from typing import Any, ClassVar

from ..lark import (
    GrammarError,
    LarkRules,
    hoisted,
    json_value,
    lark_string,
    regex_escape,
    without_defs,
)
from ..literal import MAX_NAME, Match, match_literal, partial_suffix, skip_space
from ..value_types import declared_types, typed_value
from .base import ArgumentReader, Dialect, Layout, Status, Step

# Schema keywords that only describe (safe to ignore when typing a parameter).
_ANNOTATIONS = {"description", "title", "examples", "default", "$comment", "deprecated"}


@dataclass(frozen=True)
class Xml(Dialect):
    """How one family writes a parameter (a newline in a literal is layout)."""

    key_start: str
    key_end: str
    value_end: str
    value_start: str = ""
    # the end of the element the parameters sit in (Qwen3-Coder's ``</function>``): a
    # parameter left without its end tag ends there too
    enclosing_end: str = ""

    name: ClassVar[str] = "xml"

    # -- layout, derived once ----------------------------------------------------------------
    @property
    def key_close(self) -> str:
        """The key's closing tag without its layout newline."""
        return self.key_end.rstrip("\n")

    @property
    def value_open(self) -> str:
        """The value's opening tag without its layout newline ("" if none)."""
        return self.value_start.rstrip("\n")

    @property
    def lead_newline(self) -> bool:
        """One newline may follow the value's opening (it is layout)."""
        return (self.value_start or self.key_end).endswith("\n")

    @property
    def value_close(self) -> str:
        """The value's closing tag without its layout newline."""
        return self.value_end.lstrip("\n")

    @property
    def trail_newline(self) -> bool:
        """One newline may precede the value's closing tag (it is layout)."""
        return self.value_end.startswith("\n")

    # -- reading -----------------------------------------------------------------------------
    def reader(self, properties: dict[str, Any], named: bool = True) -> ArgumentReader:
        return XmlArguments(self, properties)

    # -- writing -----------------------------------------------------------------------------
    def render_arguments(self, arguments: dict) -> str:
        return "".join(
            f"{self.key_start}{k}{self.key_end}{self.value_start}{xml_value_text(v)}"
            f"{self.value_end}\n"
            for k, v in arguments.items()
        )

    # -- forcing -----------------------------------------------------------------------------
    def arguments_grammar(
        self, layout: Layout, rule: str, function: str, parameters: dict, g: LarkRules
    ) -> list[str]:
        """One optional/required rule per declared parameter, in declaration order."""
        if parameters.get("type", "object") != "object":
            raise GrammarError(f"tool {function!r}: XML arguments need an object schema")
        required = set(parameters.get("required") or ())
        items = []
        for i, (key, prop) in enumerate((parameters.get("properties") or {}).items()):
            items_of = self._parameter(layout, function, key, prop, parameters, g)
            name = g.rule(f"{rule}_p{i}", items_of)
            items.append(name if key in required else f"{name}?")
        missing = required - set(parameters.get("properties") or {})
        if missing:
            raise GrammarError(
                f"tool {function!r}: required parameters {sorted(missing)} are not in properties"
            )
        return items

    def _parameter(
        self, layout: Layout, function: str, key: str, prop: Any, root: dict, g: LarkRules
    ) -> list[str]:
        opening = [*g.lit.seq(self.key_start), lark_string(key)]
        opening += g.lit.seq(self.key_close, self.value_open)
        types = declared_types(prop)
        if not isinstance(prop, dict) or (not types and set(prop) - _ANNOTATIONS):
            raise GrammarError(
                f"tool {function!r}, parameter {key!r}: the {layout.name} format types values "
                "by their declared JSON type, and this schema declares none"
            )
        if not types or "string" in types:
            value = self._string(layout, function, key, prop, g)
        else:
            value = [
                "WS?",
                json_value(hoisted(without_defs(prop), root), g.json_options),
                *g.lit.seq("\n" + self.value_close),
            ]
        return [*opening, *value, "WS?"]

    def _string(
        self, layout: Layout, function: str, key: str, prop: dict, g: LarkRules
    ) -> list[str]:
        """A verbatim string value and its end tag (one layout newline on each side)."""
        end = self.value_close
        trail = '"\\n"?' if self.trail_newline else None
        lead = ['"\\n"?'] if self.lead_newline else []
        choices = prop.get("enum") if "enum" in prop else None
        if "const" in prop:
            choices = [prop["const"]]
        if choices is not None:
            options = " | ".join(lark_string(str(c)) for c in choices)
            return [*lead, f"({options})", *([trail] if trail else []), *g.lit.seq(end)]
        for keyword in ("pattern", "format"):
            if keyword in prop:
                raise GrammarError(
                    f"tool {function!r}, parameter {key!r}: {keyword!r} cannot be enforced on "
                    f"verbatim strings of the {layout.name} format"
                )
        low, high = int(prop.get("minLength", 0)), prop.get("maxLength")
        bound = (
            "*" if high is None and not low else f"{{{low},{'' if high is None else int(high)}}}"
        )
        body = f"(.|\\n){bound}"
        end_re = regex_escape(end)
        tail = "\\n?" if trail else ""
        value = f"/{body}{tail}{end_re}/ & ~/(.|\\n)*{end_re}(.|\\n)+/"
        return [*lead, g.lexeme(f"{low}:{high}:{end}", value)]


# Qwen3-Coder's parameters (and those of the families that write its XML: Seed-OSS, Step 3.5,
# Nemotron 3), inside ``<function=NAME>`` … ``</function>``
QWEN_XML = Xml("<parameter=", ">\n", "\n</parameter>", enclosing_end="\n</function>")


def xml_value_text(value: object) -> str:
    """How the XML dialect writes a value: strings verbatim, everything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class _XmlPhase(Enum):
    KEY_OR_END = "key_or_end"
    KEY = "key"
    VALUE = "value"


class XmlArguments:
    """Reads XML-style parameters and streams them as a JSON object.

    A parameter declared ``string`` (or undeclared) streams as a JSON string as it arrives;
    other declared types are held until the value ends, then converted (see `value_types`).
    One newline right inside the value's tags is layout, not value.
    """

    streams = True
    unread = ""  # (a held typed value of a cut-off call is not content)
    name = ""

    def __init__(self, params: Xml, properties: dict[str, dict]) -> None:
        self._p = params
        self._properties = properties
        self._phase = _XmlPhase.KEY_OR_END
        self._count = 0
        self._opened = False
        self._key = ""
        self._string = True  # is the current key's value a string?
        self._pending = ""  # raw text of a held (non-string) value
        self._key_end = params.key_close
        self._value_open = params.value_open
        self._lead_newline = params.lead_newline
        self._value_end = params.value_close
        self._trail_newline = params.trail_newline
        # a parameter without its end tag ends where the next one opens
        self._next_key = "\n" + params.key_start if params.trail_newline else params.key_start
        self._unclosed_ends = [self._next_key]
        if params.enclosing_end:
            self._unclosed_ends.append(params.enclosing_end)
        self._stops = [self._value_end, *self._unclosed_ends]
        # the characters that can complete held markup (see `MarkedToolParser._may_decide`)
        literals = (params.key_start, params.key_end + params.value_start, params.value_end)
        self.settles = "".join({lit.rstrip()[-1] for lit in literals})

    def quick(self, text: str) -> str | None:
        """Value text that cannot hold the value's end (nor its layout newline)."""
        if self._phase is not _XmlPhase.VALUE or self._value_end[0] in text:
            return None
        if self._trail_newline and text.endswith("\n"):
            return None
        if self._string:
            return encode_basestring(text)[1:-1]
        self._pending += text
        return ""

    def feed(self, text: str, final: bool) -> Step:
        out: list[str] = []
        if not self._opened:
            self._opened = True
            out.append("{")
        pos = 0
        while True:
            if self._phase is _XmlPhase.KEY_OR_END:
                p = skip_space(text, pos)
                state, end = match_literal(text, p, self._p.key_start, final)
                if state is Match.FAIL:
                    out.append("}")
                    return "".join(out), p, Status.DONE
                if state is Match.PARTIAL:
                    return "".join(out), p, Status.MORE
                self._phase, pos = _XmlPhase.KEY, end
            elif self._phase is _XmlPhase.KEY:
                got = self._read_key(text, pos, final)
                if got is None:
                    if len(text) - pos > MAX_NAME + len(self._p.value_start) + 2 or final:
                        return "".join(out), pos, Status.FAIL
                    return "".join(out), pos, Status.MORE
                key, pos = got
                self._key, self._string = key, self._is_string(key)
                out.append((", " if self._count else "") + encode_basestring(key))
                out.append(": " + ('"' if self._string else ""))
                self._count, self._phase = self._count + 1, _XmlPhase.VALUE
            else:
                at, skip = self._value_stop(text, pos)
                if at < 0:
                    keep = 0 if final else partial_suffix(text[pos:], self._stops)
                    segment = text[pos : len(text) - keep]
                    if self._trail_newline and segment.endswith("\n") and not final:
                        segment, keep = segment[:-1], keep + 1
                    self._value_text(segment, out)
                    return "".join(out), len(text) - keep, Status.MORE
                segment = text[pos:at]
                if self._trail_newline and segment.endswith("\n"):
                    segment = segment[:-1]
                self._value_text(segment, out)
                self._close_value(out)
                self._phase, pos = _XmlPhase.KEY_OR_END, at + skip

    def _value_stop(self, text: str, pos: int) -> tuple[int, int]:
        """Where the value ends and how much markup to skip there: its end tag, or (a
        parameter left unclosed) the next parameter's opening or the enclosing element's
        end, which are kept."""
        at = text.find(self._value_end, pos)
        found = [n for n in (text.find(s, pos) for s in self._unclosed_ends) if n >= 0]
        if found and (at < 0 or min(found) < at):
            return min(found), 0
        return at, len(self._value_end)

    def close(self) -> str:
        if not self._opened:
            return ""
        if self._phase is not _XmlPhase.VALUE:
            return "}"
        if self._string:
            return '"}'
        value = typed_value(self._pending, self._properties.get(self._key))
        return json.dumps(value, ensure_ascii=False) + "}"

    def _read_key(self, text: str, pos: int, final: bool) -> tuple[str, int] | None:
        """Key, its closing tag, the value's opening and one layout newline; None if the
        text does not hold all of it yet."""
        at = text.find(self._key_end, pos)
        if at < 0 or at - pos > MAX_NAME:
            return None
        end = at + len(self._key_end)
        if self._value_open:
            state, end = match_literal(text, end, self._value_open, final)
            if state is not Match.MATCH:
                return None
        if self._lead_newline:
            if end == len(text) and not final:
                return None
            if text.startswith("\n", end):
                end += 1
        return text[pos:at].strip(), end

    def _is_string(self, key: str) -> bool:
        types = declared_types(self._properties.get(key))
        return not types or "string" in types

    def _value_text(self, segment: str, out: list[str]) -> None:
        if self._string:
            out.append(encode_basestring(segment)[1:-1])
        else:
            self._pending += segment

    def _close_value(self, out: list[str]) -> None:
        if self._string:
            out.append('"')
        else:
            value = typed_value(self._pending, self._properties.get(self._key))
            out.append(json.dumps(value, ensure_ascii=False))
            self._pending = ""
