"""Build one request's logits-processor chain from its constraint-related fields."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from vllm_mlx.families.formats import ReasoningFormat, ToolCallFormat
from vllm_mlx.protocols import LogitsProcessor, Tokenizer

from .errors import ConstraintError
from .kinds import content_constraint
from .processor import BannedTokensProcessor, ConstrainedLogitsProcessor
from .schema_check import ANY_JSON_OBJECT, check_schema
from .spec import Constraint
from .thinking import Phase, ThinkingAwareLogitsProcessor, initial_phase
from .tokenizer_cache import eos_token_ids, hf_tokenizer
from .tool_calls import call_opener_id, forced_tool_call_constraint

BACKENDS = ("llguidance", "lm-format-enforcer")
# llguidance: ≈8x faster masks than lm-format-enforcer here (see docs/constrained.md).
DEFAULT_BACKEND = "llguidance"


def resolve_backend(backend: str) -> str:
    """The concrete backend for ``auto``/a name; ConstraintError for unknown names."""
    if backend == "auto":
        return DEFAULT_BACKEND
    if backend not in BACKENDS:
        raise ConstraintError(
            f"unknown structured-output backend {backend!r}; valid: auto, {', '.join(BACKENDS)}"
        )
    return backend


@contextmanager
def _blaming(param: str) -> Iterator[None]:
    """Constraint errors raised inside name ``param`` (unless they name a field already)."""
    try:
        yield
    except ConstraintError as exc:
        if exc.param is None:
            exc.param = param
        raise


def _forces_call(tool_choice: Any, tools: list[dict] | None) -> bool:
    return bool(tools) and tool_choice not in (None, "auto", "none")


def _encode(tokenizer: Tokenizer, text: str) -> list[int]:
    return hf_tokenizer(tokenizer).encode(text, add_special_tokens=False)


def build_logits_processors(
    tokenizer: Tokenizer,
    *,
    constraint: Constraint | None = None,
    tool_choice: Any = None,
    tools: list[dict] | None = None,
    tool_format: ToolCallFormat | None = None,
    reasoning_format: ReasoningFormat | None = None,
    prompt_tail: str = "",
    thinking_budget: int | None = None,
    backend: str = "auto",
    parallel_tool_calls: bool = True,
) -> list[LogitsProcessor]:
    """The constraint processors for one request; [] when there is nothing to enforce.

    ``constraint`` shapes the answer (after any reasoning block, which stays free). A JSON
    constraint may combine with ``tool_choice`` auto (calls or schema-valid content); any
    other kind cannot combine with a forced call (ConstraintError naming both).

    ``tool_format`` is the family's call syntax (forced calls); ``reasoning_format`` its
    reasoning block, and ``prompt_tail`` (the end of the rendered prompt) decides whether
    generation starts inside it. Raises ConstraintError for anything that cannot be enforced.
    """
    if thinking_budget is not None and thinking_budget < 0:
        raise ConstraintError("thinking budget must be >= 0", "thinking_token_budget")
    backend = resolve_backend(backend)
    schema = None
    if constraint is not None and constraint.is_json:
        with _blaming(constraint.field):
            schema = (
                ANY_JSON_OBJECT
                if constraint.kind == "json_object"
                else check_schema(constraint.spec)
            )
    if constraint is not None and not constraint.is_json and _forces_call(tool_choice, tools):
        raise ConstraintError(
            f"{constraint.field} ({constraint.kind}) cannot be combined with a forced "
            "tool_choice: give one or the other",
            constraint.field,
        )
    with _blaming("tool_choice"):
        inner = forced_tool_call_constraint(
            tokenizer,
            tool_choice=tool_choice,
            tools=tools,
            tool_format=tool_format,
            parallel_tool_calls=parallel_tool_calls,
            content_schema=schema,
        )
    if inner is None and constraint is not None:
        inner = content_constraint(tokenizer, constraint, backend)
    processors = _chain(tokenizer, inner, reasoning_format, prompt_tail, thinking_budget)
    if tool_choice == "none" and tool_format is not None:
        opener = call_opener_id(tokenizer, tool_format)
        if opener is not None:
            processors.append(BannedTokensProcessor([opener]))
    return processors


def _chain(
    tokenizer: Tokenizer,
    inner: Any,
    reasoning_format: ReasoningFormat | None,
    prompt_tail: str,
    thinking_budget: int | None,
) -> list[LogitsProcessor]:
    """The content constraint, wrapped for the family's reasoning block when it has one."""

    if reasoning_format is None:
        # No reasoning block in this family: a budget has nothing to cut.
        return [ConstrainedLogitsProcessor(inner)] if inner else []

    start, end = reasoning_format.start, reasoning_format.end
    phase = initial_phase(prompt_tail, start, end)
    if phase is Phase.IDLE and reasoning_format.starts_in_reasoning:
        phase = Phase.THINKING
    if inner is None and (thinking_budget is None or phase is Phase.CONTENT):
        return []
    if phase is Phase.CONTENT:
        return [ConstrainedLogitsProcessor(inner)] if inner else []
    return [
        ThinkingAwareLogitsProcessor(
            _encode(tokenizer, start),
            _encode(tokenizer, end),
            inner=inner,
            start_phase=phase,
            budget=thinking_budget,
            eos_ids=eos_token_ids(tokenizer),
        )
    ]
