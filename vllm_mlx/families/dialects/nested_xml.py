"""The ``nested_xml`` dialect: MiniMax-M3's parameters, one element per key with every tag
behind a namespace token, ``NS<key>value NS</key>``; objects are nested elements, arrays repeat
``NS<item>``, a key repeated inside an object becomes a list (vLLM's reading).

The invoke body is held until it ends (its values are typed by the tool's schema once the
element tree is known), then released as one JSON object; a body cut off by the end of the
output is read with its open elements closed. The grammar forces declared parameters as
elements (strings verbatim, scalars as JSON, objects and arrays nested); an object or array
without declared members is refused.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, ClassVar

from ..lark import GrammarError, LarkRules, hoisted, json_value, regex_escape
from ..literal import partial_suffix
from ..value_types import declared_types, typed_value
from .base import ArgumentReader, Dialect, Layout, Status, Step

_TAG = re.compile(r"<(/?)([^<>\s/]+)>", re.DOTALL)


@dataclass
class _Element:
    key: str
    text: str = ""
    children: list[_Element] | None = None


class NestedXmlArguments:
    """Holds one invoke body until ``end``, then reads it as typed JSON."""

    streams = False
    settles = None
    unread = ""
    name = ""

    def __init__(self, namespace: str, end: str, properties: dict[str, dict]) -> None:
        self._ns = namespace
        self._end = end
        self._properties = properties
        self._raw: list[str] = []

    def close(self) -> str:
        """Nothing to close: these arguments are released whole, never cut (streams=False)."""
        return ""

    def quick(self, text: str) -> str | None:
        if self._end[0] in text:
            return None
        self._raw.append(text)
        return ""

    def feed(self, text: str, final: bool) -> Step:
        at = text.find(self._end)
        if at < 0 and not final:
            keep = partial_suffix(text, [self._end])
            self._raw.append(text[: len(text) - keep])
            return "", len(text) - keep, Status.MORE
        used = at if at >= 0 else len(text)
        self._raw.append(text[:used])
        arguments = self._read("".join(self._raw))
        if arguments is None:
            return "", used, Status.FAIL
        return json.dumps(arguments, ensure_ascii=False), used, Status.DONE

    def _read(self, body: str) -> dict | None:
        root = _Element("", children=[])
        stack = [root]
        pieces = body.split(self._ns)
        if pieces[0].strip():
            return None
        for piece in pieces[1:]:
            m = _TAG.match(piece)
            if m is None:
                return None
            closing, key = m.group(1), m.group(2)
            if not closing:
                element = _Element(key, piece[m.end() :])
                parent = stack[-1]
                parent.children = [*(parent.children or []), element]
                stack.append(element)
                continue
            while len(stack) > 1 and stack[-1].key != key:
                stack.pop()
            if len(stack) == 1:
                return None  # a closing tag that opened nowhere
            stack.pop()
        return _object(root.children or [], self._properties)


def _value(element: _Element, schema: Any) -> object:
    types = declared_types(schema)
    if element.children is None:
        return typed_value(element.text, schema if isinstance(schema, dict) else None)
    if "array" in types:
        items = schema.get("items") if isinstance(schema, dict) else None
        return [_value(child, items) for child in element.children]
    props = schema.get("properties") if isinstance(schema, dict) else None
    return _object(element.children, props if isinstance(props, dict) else {})


def _object(children: list[_Element], properties: dict) -> dict:
    """Children as members; a key written more than once is a list of its values."""
    counts = Counter(child.key for child in children)
    out: dict[str, Any] = {}
    for child in children:
        value = _value(child, properties.get(child.key))
        if counts[child.key] > 1:
            out.setdefault(child.key, []).append(value)
        else:
            out[child.key] = value
    return out


@dataclass(frozen=True)
class NestedXml(Dialect):
    """Elements behind ``namespace``; ``end`` is the literal that ends an invoke body."""

    namespace: str
    end: str

    name: ClassVar[str] = "nested_xml"

    def reader(self, properties: dict[str, Any], named: bool = True) -> ArgumentReader:
        return NestedXmlArguments(self.namespace, self.end, properties)

    def render_arguments(self, arguments: dict) -> str:
        return "".join(self._element(k, v) for k, v in arguments.items())

    def _element(self, key: str, value: object) -> str:
        """A string verbatim, anything else as JSON (read back by the schema's type)."""
        ns = self.namespace
        inner = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        return f"{ns}<{key}>{inner}{ns}</{key}>"

    def arguments_grammar(
        self, layout: Layout, rule: str, function: str, parameters: dict, g: LarkRules
    ) -> list[str]:
        return self._members(parameters, parameters, rule, g, f"tool {function!r}")

    def _members(self, schema: dict, root: dict, rule: str, g: LarkRules, where: str) -> list:
        """One optional/required element per declared property, in declaration order."""
        required = set(schema.get("required") or ())
        items = []
        for i, (key, prop) in enumerate((schema.get("properties") or {}).items()):
            name = g.rule(
                f"{rule}_p{i}", self._element_grammar(key, prop, root, f"{rule}_p{i}", g, where)
            )
            items.append(name if key in required else f"{name}?")
        return items

    def _element_grammar(
        self, key: str, prop: Any, root: dict, rule: str, g: LarkRules, where: str
    ) -> list[str]:
        """``NS<key>CONTENT NS</key>``: strings verbatim, scalars as JSON, objects and arrays
        as nested elements."""
        prop = _resolved(prop, root)
        close = self.namespace + f"</{key}>"
        # the namespace and the tag as one literal, as the format's own markers are written
        # (a lexer reading "NS" could not tell "NS<key>" from "NS</invoke>" in time)
        items = g.lit.seq(self.namespace + f"<{key}>")
        types = declared_types(prop)
        tail = g.lit.seq(close)
        if not types and isinstance(prop, dict) and set(prop) - {"description", "title"}:
            raise GrammarError(f"{where}, parameter {key!r}: the schema declares no type")
        if not types or "string" in types:  # verbatim up to the first closing tag
            low, high = int(prop.get("minLength", 0)), prop.get("maxLength")
            bound = (
                "*"
                if high is None and not low
                else f"{{{low},{'' if high is None else int(high)}}}"
            )
            end = regex_escape(close)
            value = f"/(.|\\n){bound}{end}/ & ~/(.|\\n)*{end}(.|\\n)+/"
            return [*items, g.lexeme(f"{low}:{high}:{close}", value)]
        as_json = json_value(hoisted(dict(prop), root), g.json_options)
        if "object" in types and isinstance(prop.get("properties"), dict):
            nested = " ".join(self._members(prop, root, rule, g, where)) or '""'
            return [*items, f"({nested} {' '.join(tail)} | {as_json} {' '.join(tail)})"]
        if "array" in types and isinstance(prop.get("items"), dict):
            element = self._element_grammar("item", prop["items"], root, f"{rule}_i", g, where)
            item = g.rule(f"{rule}_item", element)
            return [*items, f"({item}* {' '.join(tail)} | {as_json} {' '.join(tail)})"]
        return [*items, as_json, *tail]


def _resolved(prop: Any, root: dict) -> Any:
    """A local ``#/$defs/NAME`` reference replaced by its definition (merged with siblings)."""
    if not isinstance(prop, dict) or not isinstance(prop.get("$ref"), str):
        return prop
    ref = prop["$ref"]
    for prefix in ("#/$defs/", "#/definitions/"):
        if ref.startswith(prefix):
            defs = root.get(prefix[2:-1]) or {}
            target = defs.get(ref[len(prefix) :])
            if isinstance(target, dict):
                return {**target, **{k: v for k, v in prop.items() if k != "$ref"}}
    raise GrammarError(f"reference {ref!r} cannot be resolved")
