"""Content constraints for every kind: JSON schema / json_object on the chosen backend;
regex, choice, Lark, GBNF and structural tags on llguidance (it speaks regex and Lark
natively; GBNF is converted to Lark by llguidance's own converter).

``content_constraint`` is the public entry point: anything that wants an answer (or a custom
tool's input) shaped by a grammar builds a ``Constraint`` and calls it.
"""

from __future__ import annotations

import json
from typing import Any

import llguidance
from llguidance.gbnf_to_lark import any_to_lark

from ..protocols import Tokenizer
from .content_constraint import ContentConstraint
from .errors import ConstraintError
from .json_guard import JsonLexicalGuard
from .llguidance_backend import LLGuidanceConstraint, llguidance_tokenizer
from .lmfe_backend import LMFEConstraint
from .schema_check import ANY_JSON_OBJECT, check_schema, json_object
from .spec import Constraint

# vLLM's structural_tag: {"type": "structural_tag", "structures": [...], "triggers": [...]}
_TAG_KEYS = frozenset({"type", "structures", "triggers"})
_STRUCTURE_KEYS = frozenset({"begin", "schema", "end"})


def content_constraint(
    tokenizer: Tokenizer, constraint: Constraint, backend: str = "llguidance"
) -> ContentConstraint:
    """A matcher enforcing ``constraint``; ConstraintError (param: the constraint's field)
    when its spec is invalid or the backend cannot enforce it. ``backend`` applies to JSON
    kinds only: the other kinds always run on llguidance (lm-format-enforcer has no grammars).
    """
    try:
        if constraint.is_json:
            schema = (
                ANY_JSON_OBJECT
                if constraint.kind == "json_object"
                else check_schema(constraint.spec)
            )
            return json_schema_constraint(tokenizer, schema, backend)
        lark = lark_grammar(constraint)
        return LLGuidanceConstraint(tokenizer, lark, f"{constraint.kind}/llguidance")
    except ConstraintError as exc:
        if exc.param is None:
            exc.param = constraint.field
            raise ConstraintError(
                f"{constraint.field} ({constraint.kind}): {exc}", exc.param
            ) from None
        raise


def grammar_constraint(
    tokenizer: Tokenizer, syntax: str, definition: str, field: str = "format"
) -> ContentConstraint:
    """A constraint from a grammar given as ``syntax`` ("lark" | "regex" | "gbnf") and its
    ``definition``: the shape of OpenAI custom tools' ``format: {"type": "grammar"}``."""
    kinds = {"lark": "lark", "regex": "regex", "gbnf": "gbnf"}
    if syntax not in kinds:
        raise ConstraintError(f"unsupported grammar syntax {syntax!r}; valid: lark, regex", field)
    return content_constraint(tokenizer, Constraint(kinds[syntax], definition, field))  # type: ignore[arg-type]


def text_mismatch(tokenizer: Tokenizer, constraint: Constraint, text: str) -> str | None:
    """Why ``text`` is not a complete match of ``constraint`` (None: it is one): a check
    after generation, for output that was not constrained (a custom tool under ``auto``)."""
    ids = llguidance_tokenizer(tokenizer).tokenize_str(text)  # any spelling does: bytes count
    return content_constraint(tokenizer, constraint).mismatch(ids)


def json_schema_constraint(tokenizer: Tokenizer, schema: dict, backend: str) -> ContentConstraint:
    """A content constraint for ``schema`` on the chosen backend, with the JSON guard."""
    if backend == "lm-format-enforcer":
        constraint: ContentConstraint = LMFEConstraint(tokenizer, schema)
    else:
        constraint = LLGuidanceConstraint.for_json_schema(tokenizer, schema)
    constraint.guard = JsonLexicalGuard(tokenizer)
    return constraint


def lark_grammar(constraint: Constraint) -> str:
    """The llguidance grammar (serialized) for a non-JSON kind; ConstraintError if invalid."""
    spec = constraint.spec
    try:
        if constraint.kind == "regex":
            return llguidance.LLMatcher.grammar_from_regex(_text(spec, "a regular expression"))
        if constraint.kind == "choice":
            return llguidance.LLMatcher.grammar_from_lark(choice_lark(spec))
        if constraint.kind == "lark":
            return llguidance.LLMatcher.grammar_from_lark(_text(spec, "a Lark grammar"))
        if constraint.kind == "gbnf":
            return llguidance.LLMatcher.grammar_from_lark(
                any_to_lark(_text(spec, "a GBNF grammar"))
            )
        return structural_tag_grammar(spec)
    except ConstraintError:
        raise
    except Exception as exc:  # the converters raise ValueError and their own error types
        raise ConstraintError(f"invalid {constraint.kind}: {exc}") from None


def choice_lark(choices: Any) -> str:
    """``start: "a" | "b"``: exactly one of the strings."""
    if not isinstance(choices, list) or not choices:
        raise ConstraintError("choice must be a non-empty list of strings")
    if not all(isinstance(c, str) and c for c in choices):
        raise ConstraintError("choice must be a list of non-empty strings")
    return "start: " + " | ".join(json.dumps(c) for c in choices)


def structural_tag_grammar(spec: Any) -> str:
    """vLLM's structural tag as llguidance lazy tags: free text, and after a trigger the
    structure that begins with it (begin, JSON per schema, end)."""
    spec = json_object(spec, "structural_tag")
    unknown = set(spec) - _TAG_KEYS
    if unknown:
        raise ConstraintError(f"unknown structural_tag key {sorted(unknown)[0]!r}")
    triggers, structures = spec.get("triggers"), spec.get("structures")
    if not isinstance(triggers, list) or not all(isinstance(t, str) and t for t in triggers):
        raise ConstraintError("structural_tag.triggers must be a list of non-empty strings")
    if not isinstance(structures, list) or not structures:
        raise ConstraintError("structural_tag.structures must be a non-empty list")
    tags = []
    for i, item in enumerate(structures):
        if not isinstance(item, dict) or set(item) - _STRUCTURE_KEYS:
            raise ConstraintError(f"structural_tag.structures[{i}] takes begin, schema, end")
        begin, end = item.get("begin"), item.get("end", "")
        if not isinstance(begin, str) or not isinstance(end, str):
            raise ConstraintError(f"structural_tag.structures[{i}] begin/end must be strings")
        trigger = next((t for t in triggers if begin.startswith(t)), None)
        if trigger is None:
            raise ConstraintError(f"structural_tag.structures[{i}].begin starts with no trigger")
        schema = check_schema(item.get("schema", {}))
        tags.append(llguidance.StructTag(trigger=trigger, begin=begin, grammar=schema, end=end))
    return llguidance.LLMatcher.grammar_from_lark(
        llguidance.StructTag.to_grammar(tags, assume_special=False)
    )


def _text(spec: Any, what: str) -> str:
    if not isinstance(spec, str) or not spec:
        raise ConstraintError(f"expected {what} as a non-empty string")
    return spec
