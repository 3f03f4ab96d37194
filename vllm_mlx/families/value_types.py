"""Typing XML-style argument values by the tool's JSON schema.

A value declared ``string`` (or not declared at all) is kept verbatim, even when it looks like
a number or JSON. Other declared types convert (``null`` / ``None`` is JSON null whatever the
type); a value that cannot convert stays a string,
so a call is never dropped over a type mismatch. No HTML unescaping.
"""

from __future__ import annotations

import json
import math


def declared_types(schema: dict | None) -> list[str]:
    """The JSON types a property schema allows, in declaration order."""
    if not isinstance(schema, dict):
        return []
    kind = schema.get("type")
    if isinstance(kind, str):
        return [kind]
    if isinstance(kind, list):
        return [k for k in kind if isinstance(k, str)]
    found: list[str] = []
    for key in ("anyOf", "oneOf"):
        for sub in schema.get(key) or []:
            found += declared_types(sub)
    if not found and "enum" in schema:
        found = ["string"] if all(isinstance(v, str) for v in schema["enum"]) else ["json"]
    return found


def typed_value(raw: str, schema: dict | None) -> object:
    """Convert ``raw`` to the declared type, or keep it as the string it is."""
    types = declared_types(schema)
    if not types or "string" in types:
        return raw
    text = raw.strip()
    if text in _NULLS:  # JSON's and Python's null for a typed value: no value, not a string
        return None
    for kind in types:
        converted = _convert(text, kind)
        if converted is not _FAILED:
            return converted
    return raw


_FAILED = object()
_NULLS = ("null", "None")
_PY_TYPES = {"object": dict, "array": list}


def _convert(text: str, kind: str) -> object:
    if kind == "integer":
        try:
            return int(text)
        except ValueError:
            return _FAILED
    if kind == "number":
        try:
            number = int(text) if text.lstrip("-").isdigit() else float(text)
        except ValueError:
            return _FAILED
        return number if math.isfinite(number) else _FAILED
    if kind == "boolean":
        return {"true": True, "false": False}.get(text.lower(), _FAILED)
    if kind == "null":
        return None if text.lower() in ("null", "none", "") else _FAILED
    try:
        value = json.loads(text)
    except ValueError:
        return _FAILED
    expected = _PY_TYPES.get(kind)
    return value if expected is None or isinstance(value, expected) else _FAILED
