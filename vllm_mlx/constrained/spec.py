"""The one typed value a request's output constraint becomes, whatever field it came in.

Surfaces only translate their fields (``response_format``, ``structured_outputs``,
``guided_regex``, ``output_format``, ``text.format``…) into a ``Constraint``; what each kind
means is decided here and in ``kinds.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .errors import ConstraintError

ConstraintKind = Literal[
    "json_schema", "json_object", "regex", "choice", "lark", "gbnf", "structural_tag"
]
KINDS: tuple[str, ...] = (
    "json_schema",
    "json_object",
    "regex",
    "choice",
    "lark",
    "gbnf",
    "structural_tag",
)
# Kinds whose answer is JSON: they keep the JSON guard and may combine with tool calls.
JSON_KINDS = frozenset({"json_schema", "json_object"})


@dataclass(frozen=True)
class Constraint:
    """What the answer must match.

    ``spec`` by kind: json_schema a schema (dict, or JSON text); json_object None; regex the
    pattern; choice a list of strings; lark / gbnf the grammar text; structural_tag the vLLM
    ``{"structures": [...], "triggers": [...]}`` object. ``field`` is the request field it came
    from, so a 400 about it names that field.
    """

    kind: ConstraintKind
    spec: Any = None
    field: str = "response_format"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConstraintError(f"unknown constraint kind {self.kind!r}", self.field)

    @property
    def is_json(self) -> bool:
        return self.kind in JSON_KINDS


def from_response_format(
    response_format: dict[str, Any] | None, field: str = "response_format"
) -> Constraint | None:
    """OpenAI's ``response_format`` (chat shape ``{"type": "json_schema", "json_schema":
    {"schema": ...}}`` or Responses shape ``{"type": "json_schema", "schema": ...}``)."""
    if not response_format:
        return None
    if not isinstance(response_format, dict):
        raise ConstraintError(f"{field} must be an object", field)
    kind = response_format.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return Constraint("json_object", None, field)
    if kind == "structural_tag":  # vLLM's extension: the tag object is the format itself
        return Constraint("structural_tag", response_format, field)
    if kind != "json_schema":
        raise ConstraintError(f"unsupported {field} type {kind!r}", f"{field}.type")
    spec = response_format.get("json_schema", response_format)
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if schema is None:
        raise ConstraintError(f"{field} json_schema needs a 'schema' object", field)
    return Constraint("json_schema", schema, field)
