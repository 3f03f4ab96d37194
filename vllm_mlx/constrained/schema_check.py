"""Check a request's JSON schema (or raise a 400-worthy error).

Invalid schemas are rejected with the jsonschema error; keywords a backend cannot enforce are
rejected by name, so a request is never answered with silently unconstrained output.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema

from .errors import ConstraintError

# Keywords that only annotate, or that we handle before compiling: safe on every backend.
ANNOTATION_KEYWORDS = frozenset(
    {
        "$schema",
        "$id",
        "$comment",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$defs",
        "definitions",
        "strict",
        "name",
    }
)

# What lm-format-enforcer 0.11 actually enforces (it silently ignores anything else).
# minLength/maxLength/pattern are left out: its string parsing lets multi-character tokens
# overrun length bounds (measured: 13 characters under maxLength 12 and under {0,12}).
LMFE_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "anyOf",
        "oneOf",
        "allOf",
        "$ref",
        "minItems",
        "maxItems",
        "format",
    }
)
LMFE_FORMATS = frozenset({"date", "time", "date-time", "uuid"})

# Keywords whose value is a map of name -> subschema, or a list of subschemas.
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_VALUES = (
    "items",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
)

ANY_JSON_OBJECT: dict[str, Any] = {"type": "object"}

# Deeper than this is no schema a client means, and the checks (and backends) recurse.
MAX_SCHEMA_DEPTH = 64


def json_object(value: Any, what: str) -> dict[str, Any]:
    """``value`` as an object, parsed when it is JSON text (a request may send either);
    a ConstraintError naming ``what`` when it is neither."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConstraintError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ConstraintError(f"{what} must be an object")
    return value


def check_schema(schema: Any) -> dict[str, Any]:
    """Validate ``schema`` against its metaschema; raise ConstraintError with the error."""
    schema = json_object(schema, "JSON schema")
    check_enforceable(schema)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ConstraintError(f"invalid JSON schema: {exc.message}") from exc
    return schema


def check_enforceable(schema: Any) -> None:
    """Refuse what no backend can enforce, before anything recurses into it: a schema
    nested past ``MAX_SCHEMA_DEPTH``, a ``$schema`` that is not a string, and recursion
    (``{"$ref": "#"}``, ``$ref`` cycles), which the grammar backends drop silently."""
    _check_depth(schema)
    if isinstance(schema, dict) and not isinstance(schema.get("$schema", ""), str):
        raise ConstraintError("JSON schema $schema must be a string (a metaschema URI)")
    try:
        _check_no_cycle(schema)
    except RecursionError:
        raise ConstraintError("JSON schema $ref chains are too long to enforce") from None


def _check_depth(schema: Any) -> None:
    stack = [(schema, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_SCHEMA_DEPTH:
            raise ConstraintError(f"JSON schema is nested deeper than {MAX_SCHEMA_DEPTH} levels")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def _check_no_cycle(root: Any) -> None:
    """Follow local ``$ref`` pointers from the root; a reference back to a schema on the
    current path is recursion. Depth is bounded (``_check_depth``), so is this recursion."""
    done: set[int] = set()

    def visit(node: Any, path: tuple[int, ...]) -> None:
        if not isinstance(node, dict) or id(node) in done:
            return
        if id(node) in path:
            raise ConstraintError(
                "recursive JSON schemas ($ref to an enclosing schema) cannot be enforced"
            )
        path = (*path, id(node))
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):
            visit(_resolve(root, ref), path)
        for child in _children(node):
            visit(child, path)
        done.add(id(node))

    visit(root, ())


def _children(schema: dict[str, Any]) -> Iterator[Any]:
    for key in _SCHEMA_MAPS:
        value = schema.get(key)
        if isinstance(value, dict):
            yield from value.values()
    for key in _SCHEMA_LISTS:
        value = schema.get(key)
        if isinstance(value, list):
            yield from value
    for key in _SCHEMA_VALUES:
        value = schema.get(key)
        yield from value if isinstance(value, list) else [value]


def _resolve(root: Any, ref: str) -> Any:
    """The schema a local JSON pointer (``#``, ``#/$defs/a``) names; None if it names none."""
    node = root
    for raw in ref[1:].split("/")[1:] if ref != "#" else []:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def subschemas(schema: Any) -> Iterator[dict[str, Any]]:
    """Every (sub)schema object in ``schema``, depth first."""
    if not isinstance(schema, dict):
        return
    yield schema
    for key in _SCHEMA_MAPS:
        for sub in (schema.get(key) or {}).values():
            yield from subschemas(sub)
    for key in _SCHEMA_LISTS:
        for sub in schema.get(key) or ():
            yield from subschemas(sub)
    for key in _SCHEMA_VALUES:
        yield from subschemas(schema.get(key))


def reject_unsupported_for_lmfe(schema: dict[str, Any]) -> None:
    """Raise ConstraintError naming the first keyword lm-format-enforcer cannot enforce."""
    for sub in subschemas(schema):
        for key, value in sub.items():
            if key in ANNOTATION_KEYWORDS or key.startswith("x-"):
                continue
            if key not in LMFE_KEYWORDS:
                raise ConstraintError(
                    f"JSON schema keyword {key!r} is not supported by the lm-format-enforcer "
                    "backend"
                )
            if key == "format" and value not in LMFE_FORMATS:
                raise ConstraintError(f"JSON schema format {value!r} is not supported")
            if key == "items" and isinstance(value, list):
                raise ConstraintError("JSON schema keyword 'items' as a list is not supported")
