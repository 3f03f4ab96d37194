"""Constrained decoding: logits processors that enforce JSON schemas, forced tool calls and
thinking budgets token by token (see docs/constrained.md)."""

from .builder import BACKENDS, DEFAULT_BACKEND, build_logits_processors
from .errors import ConstraintError
from .thinking import Phase, ThinkingAwareLogitsProcessor

__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "ConstraintError",
    "Phase",
    "ThinkingAwareLogitsProcessor",
    "build_logits_processors",
]
