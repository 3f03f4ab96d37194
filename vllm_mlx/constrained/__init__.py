"""Constrained decoding: logits processors that enforce JSON schemas, regexes,
choices, Lark/GBNF grammars, forced tool calls and
thinking budgets token by token (see docs/constrained.md)."""

from .builder import BACKENDS, DEFAULT_BACKEND, build_logits_processors
from .errors import ConstraintError
from .kinds import content_constraint, grammar_constraint, text_mismatch
from .spec import KINDS, Constraint, from_response_format
from .thinking import Phase, ThinkingAwareLogitsProcessor

__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "KINDS",
    "Constraint",
    "ConstraintError",
    "Phase",
    "ThinkingAwareLogitsProcessor",
    "build_logits_processors",
    "content_constraint",
    "from_response_format",
    "grammar_constraint",
    "text_mismatch",
]
