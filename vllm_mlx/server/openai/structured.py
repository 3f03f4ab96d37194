"""The output-constraint fields clients send to OpenAI-style endpoints, translated into the
one ``Constraint`` (chat and text completions alike): OpenAI ``response_format``, vLLM
``structured_outputs`` and its older ``guided_*`` fields, SGLang ``regex`` / ``ebnf``,
llama.cpp ``grammar`` / ``json_schema``. At most one per request; nothing is ignored."""

from __future__ import annotations

from typing import Any

from ...constrained import Constraint, ConstraintError, from_response_format
from ..errors import APIError

# Top-level fields -> kind. "gbnf" also accepts Lark text (llguidance detects `start:`).
TOP_LEVEL: dict[str, str] = {
    "guided_json": "json_schema",
    "guided_regex": "regex",
    "guided_choice": "choice",
    "guided_grammar": "gbnf",
    "regex": "regex",
    "ebnf": "gbnf",
    "grammar": "gbnf",
    "json_schema": "json_schema",
}
# vLLM structured_outputs keys -> kind.
STRUCTURED_OUTPUTS: dict[str, str] = {
    "json": "json_schema",
    "regex": "regex",
    "choice": "choice",
    "grammar": "gbnf",
    "json_object": "json_object",
    "structural_tag": "structural_tag",
}
# vLLM options that hold here by construction: there is never a fallback to unconstrained.
STRUCTURED_OPTIONS = frozenset({"disable_fallback"})


def constraint_of(body: Any) -> Constraint | None:
    """The request's one constraint (None: free text); APIError 400 naming the field for a
    malformed one, an unknown ``structured_outputs`` key, or two constraints at once."""
    found = [c for c in (_response_format(body), *_top_level(body), *_structured(body)) if c]
    if len(found) > 1:
        first, second = found[0].field, found[1].field
        raise APIError(
            400,
            f"at most one output constraint per request: got both {first} and {second}",
            param=second,
        )
    return found[0] if found else None


def _response_format(body: Any) -> Constraint | None:
    try:
        return from_response_format(getattr(body, "response_format", None))
    except ConstraintError as exc:
        raise APIError(400, str(exc), param=exc.param) from None


def _top_level(body: Any) -> list[Constraint]:
    return [
        Constraint(kind, value, name)  # type: ignore[arg-type]
        for name, kind in TOP_LEVEL.items()
        if (value := getattr(body, name, None)) is not None
    ]


def _structured(body: Any) -> list[Constraint]:
    spec = getattr(body, "structured_outputs", None)
    if spec is None:
        return []
    if not isinstance(spec, dict):
        raise APIError(400, "structured_outputs must be an object", param="structured_outputs")
    found = []
    for key, value in spec.items():
        field = f"structured_outputs.{key}"
        if key in STRUCTURED_OPTIONS:
            continue
        if key not in STRUCTURED_OUTPUTS:
            valid = ", ".join([*STRUCTURED_OUTPUTS, *sorted(STRUCTURED_OPTIONS)])
            raise APIError(
                400, f"unknown key {key!r} in structured_outputs; valid: {valid}", param=field
            )
        if value is None or value is False:
            continue
        kind = STRUCTURED_OUTPUTS[key]
        if kind == "json_object":
            if value is not True:
                raise APIError(400, "structured_outputs.json_object must be true", param=field)
            value = None
        found.append(Constraint(kind, value, field))  # type: ignore[arg-type]
    if len(found) > 1:
        raise APIError(
            400,
            f"structured_outputs takes one constraint: got both {found[0].field} and "
            f"{found[1].field}",
            param=found[1].field,
        )
    return found
