"""The ``python`` dialect with a grammar: ``NAME(a=1, b='x')`` forced from the tool's schema
(LFM2). The grammar writes each declared parameter as ``key=VALUE`` in declaration order
(required ones always, optional ones maybe): an unconstrained string quoted either way,
``True``/``False``/``None``, and everything the schema constrains (numbers, constrained
strings, lists, dicts, references) as JSON, which is Python too once the reader takes
``true``/``false``/``null`` for Python's names. An undeclared type is any literal. The writer
writes what the grammar forces (scalars as Python, lists and dicts as JSON)."""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Callable
from typing import Any, ClassVar

from ..lark import GrammarError, LarkRules, hoisted, json_value, lark_string, without_defs
from ..value_types import declared_types
from .base import ArgumentReader, Layout
from .python import PythonArguments, PythonDialect, _python_literal

_STRING = r"""/'([^'\\\n]|\\.)*'|"([^"\\\n]|\\.)*"/"""
_NUMBER = r"/-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/"
_ANY = "py_any"


class ForcedPythonDialect(PythonDialect):
    name: ClassVar[str] = "python_forced"
    has_grammar: ClassVar[bool] = True

    def reader(self, properties: dict[str, Any], named: bool = True) -> ArgumentReader:
        return JsonSafeArguments()

    def render_arguments(self, arguments: dict) -> str:
        """Scalars as Python writes them, lists and dicts as JSON (what the grammar forces)."""
        return ", ".join(f"{k}={_value_text(v)}" for k, v in arguments.items()) + ")"

    def arguments_grammar(
        self, layout: Layout, rule: str, function: str, parameters: dict, g: LarkRules
    ) -> list[str]:
        if parameters.get("type", "object") != "object":
            raise GrammarError(f"tool {function!r}: Python arguments need an object schema")
        writer = _Values(g, parameters)
        members = [
            (key, [lark_string(f"{key}="), *writer.value(prop, f"{rule}_p{i}")])
            for i, (key, prop) in enumerate((parameters.get("properties") or {}).items())
        ]
        required = set(parameters.get("required") or ())
        missing = required - {key for key, _ in members}
        if missing:
            raise GrammarError(
                f"tool {function!r}: required parameters {sorted(missing)} are not in properties"
            )
        return [*_members(g, f"{rule}_m", members, required), '")"']


class JsonSafeArguments(PythonArguments):
    """Python keyword arguments whose values must become JSON: sets and tuples are lists
    (vLLM's LFM2 reading), anything else JSON cannot hold (bytes, complex, non-finite
    numbers) ends the call."""

    def _read(self, source: str) -> dict | None:
        found = _keywords(source)
        if found is None and "\n" in source:  # a raw newline inside a quoted string
            found = _keywords(source.replace("\n", "\\n"))
        return found


def _keywords(source: str) -> dict | None:
    """``k=v, ...`` read as Python literals made JSON-safe; None if it is not that."""
    try:
        call = ast.parse(f"f({source})", mode="eval").body
        if not isinstance(call, ast.Call) or call.args:
            return None
        return {
            kw.arg: _json_safe(ast.literal_eval(_SetsAsLists().visit(kw.value)))
            for kw in call.keywords
            if kw.arg
        }
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return None


class _SetsAsLists(ast.NodeTransformer):
    """A set literal read as the list it was written as (set order is not stable), and the
    JSON names ``true``/``false``/``null`` as Python's (containers are written as JSON)."""

    def visit_Set(self, node: ast.Set) -> ast.AST:
        return ast.List(elts=[self.visit(e) for e in node.elts], ctx=ast.Load())

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in _JSON_NAMES:
            return ast.Constant(_JSON_NAMES[node.id])
        return node


_JSON_NAMES = {"true": True, "false": False, "null": None}


def _json_safe(value: object) -> object:
    if isinstance(value, (set, frozenset, tuple, list)):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {_json_key(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("non-finite number")
    if value is None or isinstance(value, (str, int, float)):
        return value
    raise ValueError(f"{type(value).__name__} is not JSON")


def _json_key(key: object) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, (int, float, bool)) or key is None:
        return json.dumps(key)
    raise ValueError(f"{type(key).__name__} key is not JSON")


def _members(
    g: LarkRules, rule: str, members: list[tuple[str, list[str]]], required: set[str]
) -> list[str]:
    """Items for ``m0, m1, ...`` where the optional members may be left out (the separator
    is written only between members present): ``first_i`` starts at member i, ``rest_i``
    follows a member already written."""
    rest: list[str] = []  # items of rest_{i+1}
    first: list[str] = []  # items of first_{i+1} ([] = nothing may follow)
    for i in range(len(members) - 1, -1, -1):
        key, items = members[i]
        member = g.rule(f"{rule}{i}", items)
        after = [g.rule(f"{rule}_rest{i + 1}", rest)] if rest else []
        if key in required:
            new_rest = ['", "', member, *after]
            new_first = [member, *after]
        else:
            new_rest = [f'(", " {member})?', *after]
            tail = f"{g.rule(f'{rule}_first{i + 1}', first)}" if first else ""
            new_first = [f"({' '.join([member, *after])}{' | ' + tail if tail else ''})"]
            if not tail:
                new_first = [f"({' '.join([member, *after])})?"]
        rest, first = new_rest, new_first
    return first


def _value_text(value: object) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return _python_literal(value)


class _Values:
    """Lark items for Python literals of a JSON schema's types."""

    def __init__(self, g: LarkRules, root: dict) -> None:
        self.g = g
        self.root = root
        if not any(r.startswith(f"{_ANY}:") for r in g.rules):
            self._any()

    def value(self, schema: Any, rule: str) -> list[str]:
        if not isinstance(schema, dict):
            return [_ANY]
        if "$ref" in schema:
            return [self._json(schema)]
        if "const" in schema or "enum" in schema:
            choices = [schema["const"]] if "const" in schema else list(schema["enum"])
            return ["(" + " | ".join(lark_string(_python_literal(c)) for c in choices) + ")"]
        types = declared_types(schema)
        if not types:
            return [_ANY]
        writers: dict[str, Callable[[], list[str]]] = {
            "string": lambda: self._string(schema),
            "integer": lambda: [self._json({**schema, "type": "integer"})],
            "number": lambda: [self._json({**schema, "type": "number"})],
            "boolean": lambda: ['("True" | "False")'],
            "null": lambda: ['"None"'],
            "array": lambda: [self._json({**schema, "type": "array"})],
            "object": lambda: [self._json({**schema, "type": "object"})],
        }
        options = []
        for kind in dict.fromkeys(types):
            if kind not in writers:
                return [_ANY]
            options.append(" ".join(writers[kind]()))
        return ["(" + " | ".join(options) + ")"]

    def _string(self, schema: dict) -> list[str]:
        """A quoted string; one the schema constrains is forced as JSON writes it."""
        if set(schema) & {"minLength", "maxLength", "pattern", "format"}:
            return [self._json({**schema, "type": "string"})]
        return [self.g.lexeme("py_string", _STRING)]

    def _json(self, schema: dict) -> str:
        """JSON text for ``schema`` (JSON numbers, strings, lists and dicts read as Python)."""
        return json_value(hoisted(without_defs(schema), self.root), self.g.json_options)

    def _any(self) -> None:
        """Any Python literal (``py_any``)."""
        g = self.g
        string = g.lexeme("py_string", _STRING)
        number = g.lexeme("py_number", _NUMBER)
        pair = f'{_ANY} ": " {_ANY}'
        g.rule(
            _ANY,
            [
                f'{string} | {number} | "True" | "False" | "None" | "true" | "false" | "null"'
                f' | "[" ({_ANY} (", " {_ANY})*)? "]"'
                f' | "{{" ({pair} (", " {pair})*)? "}}"'
            ],
        )


FORCED_PYTHON = ForcedPythonDialect()
