"""Grammars for the literal argument dialects (``python`` kwargs, ``gemma`` objects): each
parameter's value written in the dialect's own literal syntax, typed by its JSON schema.

Declared properties come in schema order, required ones mandatory, the others optional; an
object without declared properties takes any keys. Strings with ``pattern``, ``format`` or
length bounds, and ``$ref``s, cannot be expressed here: GrammarError (a 400), never a call
that would silently ignore them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..lark import GrammarError, LarkRules, lark_string

_NUMBER = r"/-?[0-9]{1,16}(\.[0-9]{0,16})?/"
_INTEGER = r"/-?[0-9]{1,16}/"
_KEY = r"/[A-Za-z_][A-Za-z0-9_]{0,63}/"
_STRING_BOUNDS = ("pattern", "format", "minLength", "maxLength")


@dataclass(frozen=True)
class LiteralSyntax:
    """How one dialect writes values: a string's lexeme (inside ``quote`` items, gemma's
    ``<|"|>``), its true/false/null, the top-level member key (``kwarg``: ``{}=``), nested
    objects' key forms and colon, and the separator between members and list elements."""

    name: str
    string: str  # Lark lexeme body of a string (quotes included unless ``quoted``)
    true: str
    false: str
    null: str
    kwarg: str
    keys: tuple[str, ...]  # nested object keys, "{}" is the name: '"{}"' or '{}'
    colon: tuple[str, ...]  # Lark items after a nested key
    separator: tuple[str, ...]  # Lark items between members and list elements
    quoted: bool = False  # strings sit between the dialect's quote marker (gemma)

    def render(self, value: Any) -> str:
        """``value`` (an enum/const) as this dialect writes it (strings: python only)."""
        if value is None:
            return self.null
        if value is True:
            return self.true
        if value is False:
            return self.false
        if isinstance(value, (int, float, str)):
            return repr(value)
        raise GrammarError(f"enum value {value!r} cannot be written in the {self.name} dialect")


class LiteralGrammar:
    """Writes member and value rules for one call into ``g``."""

    def __init__(self, syntax: LiteralSyntax, g: LarkRules, quote: list[str]) -> None:
        self.s = syntax
        self.g = g
        self.quote = quote  # the string quote marker as Lark items (maybe a special token)

    def members(self, rule: str, schema: dict[str, Any], top: bool) -> list[str]:
        """Items for the members of an object ``schema`` (without its brackets)."""
        props = schema.get("properties") or {}
        if not isinstance(props, dict):
            raise GrammarError("properties must be an object")
        if not props:
            return [self._any_members(top)]
        required = set(schema.get("required") or ())
        names = list(props)
        items = [self._member(f"{rule}_m{i}", n, props[n], top) for i, n in enumerate(names)]
        # first[i]: the members from i on with none before; after[i]: the same after one
        # (so each starts with a separator): optional members without dangling separators.
        sep = " ".join(self.s.separator)
        after, first = ['""'] * (len(names) + 1), ['""'] * (len(names) + 1)
        for i in range(len(names) - 1, -1, -1):
            with_it_after = f"{sep} {items[i]} {after[i + 1]}"
            with_it_first = f"{items[i]} {after[i + 1]}"
            if names[i] not in required:
                with_it_after = f"({with_it_after} | {after[i + 1]})"
                with_it_first = f"({with_it_first} | {first[i + 1]})"
            after[i] = self.g.rule(f"{rule}_b{i}", [with_it_after])
            first[i] = self.g.rule(f"{rule}_a{i}", [with_it_first])
        return [first[0]]

    def _member(self, rule: str, name: str, schema: Any, top: bool) -> str:
        if top:
            key = lark_string(self.s.kwarg.format(name))
        else:
            forms = " | ".join(lark_string(k.format(name)) for k in self.s.keys)
            key = f"({forms}) {' '.join(self.s.colon)}"
        return self.g.rule(rule, [key, self.value(f"{rule}v", schema)])

    def value(self, rule: str, schema: Any) -> str:
        """One item matching a value of ``schema`` in the dialect's syntax."""
        if schema is True or schema is None or schema == {}:
            return self._any()
        if not isinstance(schema, dict):
            raise GrammarError(f"unsupported schema {schema!r}")
        schema = {k: v for k, v in schema.items() if k not in _ANNOTATIONS}
        if "$ref" in schema:
            raise GrammarError(f"$ref parameters cannot be forced in the {self.s.name} dialect")
        if "enum" in schema or "const" in schema:
            values = schema["enum"] if "enum" in schema else [schema["const"]]
            return "(" + " | ".join(self._literal(v) for v in values) + ")"
        for key in ("anyOf", "oneOf"):
            if key in schema:
                subs = [self.value(f"{rule}{j}", s) for j, s in enumerate(schema[key])]
                return "(" + " | ".join(subs) + ")"
        kind = schema.get("type")
        if isinstance(kind, list):
            subs = [self.value(f"{rule}{j}", {**schema, "type": t}) for j, t in enumerate(kind)]
            return "(" + " | ".join(subs) + ")"
        if kind == "string":
            bound = next((b for b in _STRING_BOUNDS if b in schema), None)
            if bound:
                raise GrammarError(
                    f"string {bound!r} cannot be forced in the {self.s.name} dialect"
                )
            return self._string()
        if kind == "integer":
            return self.g.lexeme("integer", _INTEGER)
        if kind == "number":
            return self.g.lexeme("number", _NUMBER)
        if kind == "boolean":
            return f"({lark_string(self.s.true)} | {lark_string(self.s.false)})"
        if kind == "null":
            return lark_string(self.s.null)
        if kind == "array":
            item = self.value(f"{rule}i", schema.get("items", {}))
            return self.g.rule(rule, ['"["', *self._repeated(item), '"]"'])
        if kind == "object":
            return self.g.rule(rule, ['"{"', *self.members(rule, schema, False), '"}"'])
        if kind is None:
            return self._any()
        raise GrammarError(f"unsupported parameter type {kind!r}")

    def _literal(self, value: Any) -> str:
        if isinstance(value, str) and self.s.quoted:
            return " ".join([*self.quote, lark_string(value), *self.quote])
        return lark_string(self.s.render(value))

    def _string(self) -> str:
        lexeme = self.g.lexeme(f"{self.s.name}_string", self.s.string)
        return " ".join([*self.quote, lexeme, *self.quote])

    def _repeated(self, item: str) -> list[str]:
        sep = " ".join(self.s.separator)
        return [f"({item} ({sep} {item})*)?"]

    def _any(self) -> str:
        """Any literal value (recursive), defined once per grammar."""
        name = f"{self.s.name}_any"
        if any(r.startswith(name + ":") for r in self.g.rules):
            return name
        self.g.rules.append(name + ': ""')  # reserved before the body refers to it
        at = len(self.g.rules) - 1
        key = self._string() if not self.s.quoted else self.g.lexeme("key", _KEY)
        member = f"{key} {' '.join(self.s.colon)} {name}"
        body = [
            self._string(),
            self.g.lexeme("number", _NUMBER),
            lark_string(self.s.true),
            lark_string(self.s.false),
            lark_string(self.s.null),
            '"[" ' + " ".join(self._repeated(name)) + ' "]"',
            '"{" ' + " ".join(self._repeated(f"({member})")) + ' "}"',
        ]
        self.g.rules[at] = f"{name}: " + " | ".join(body)
        return name

    def _any_members(self, top: bool) -> str:
        key = self.g.lexeme("key", _KEY)
        head = (
            f"{key} {lark_string(self.s.kwarg.format(''))}"
            if top
            else (f"{key} {' '.join(self.s.colon)}")
        )
        return " ".join(self._repeated(f"({head} {self._any()})"))


_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment"})
