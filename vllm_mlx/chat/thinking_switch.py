"""Thinking on/off and effort: written under the key the model's chat template actually reads.

Templates disagree on the switch's name (``enable_thinking`` for Qwen3, ``thinking`` for
DeepSeek V3.1, ``thinking_mode`` elsewhere); passing the wrong one is silently ignored. The key
is found by reading the template source, and the request's thinking intent (on/off, budget,
effort; see ``vllm_mlx.request.Thinking``) is mapped onto it, for every API surface alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# Template variables that switch thinking, in order of preference when several appear.
THINKING_KEYS = ("enable_thinking", "thinking", "thinking_mode", "enable_reasoning", "reasoning")

# reasoning effort -> thinking token budget (None: no cap); "none" switches thinking off.
# The one table for every surface (chat ``reasoning_effort``, Responses
# ``reasoning.effort``, the Python API): docs/apis.md.
EFFORT_BUDGETS: dict[str, int | None] = {
    "minimal": 256,
    "low": 1024,
    "medium": 4096,
    "high": None,
    "xhigh": None,
}
EFFORTS = ("none", *EFFORT_BUDGETS)


def thinking_key(chat_template: str | None) -> str | None:
    """The variable the template reads to switch thinking, or None if it has no switch."""
    if not chat_template:
        return None
    for key in THINKING_KEYS:
        if re.search(rf"\b{re.escape(key)}\b", chat_template):
            return key
    return None


class UnknownEffortError(ValueError):
    """A reasoning effort outside ``EFFORTS``."""


@dataclass(frozen=True)
class ThinkingDecision:
    """Whether to think (None: the template's default), its budget, and the template kwargs."""

    enabled: bool | None
    budget: int | None
    template_kwargs: dict[str, Any]


def decide_thinking(
    chat_template: str | None,
    *,
    enabled: bool | None = None,
    budget: int | None = None,
    effort: str | None = None,
    template_kwargs: dict[str, Any] | None = None,
    default_budget: int | None = None,
) -> ThinkingDecision:
    """Map a request's thinking intent onto the template's switch and a budget.

    Precedence: explicit ``template_kwargs`` > ``enabled`` / ``budget`` > ``effort``
    ("none" disables; the others enable with ``EFFORT_BUDGETS``). ValueError for an unknown
    effort or a negative budget.
    """
    if effort is not None:
        if effort not in EFFORTS:
            raise UnknownEffortError(
                f"unknown reasoning effort {effort!r}; valid: {', '.join(EFFORTS)}"
            )
        if enabled is None:
            enabled = effort != "none"
        if budget is None and effort != "none":
            budget = EFFORT_BUDGETS[effort]
    if budget is not None and budget < 0:
        raise ValueError("thinking budget must be >= 0")
    key = thinking_key(chat_template)
    kwargs: dict[str, Any] = {}
    if key is not None and enabled is not None:
        kwargs[key] = enabled
    for name, value in (template_kwargs or {}).items():
        kwargs[name] = value
        if name in THINKING_KEYS and isinstance(value, bool):
            enabled = value
    if enabled is False:
        budget = None
    elif budget is None:
        budget = default_budget
    return ThinkingDecision(enabled, budget, kwargs)
