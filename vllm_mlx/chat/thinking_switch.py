"""Thinking on/off and effort: written under the key the model's chat template actually reads.

Templates disagree on the switch's name (``enable_thinking`` for Qwen3, ``thinking`` for
DeepSeek V3.1, ``thinking_mode`` elsewhere); passing the wrong one is silently ignored. The key
is found by reading the template source, and request fields (OpenAI ``reasoning_effort``,
Anthropic ``thinking``, ``enable_thinking``, ``chat_template_kwargs``) are mapped onto it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# Template variables that switch thinking, in order of preference when several appear.
THINKING_KEYS = ("enable_thinking", "thinking", "thinking_mode", "enable_reasoning", "reasoning")

# reasoning_effort -> thinking token budget (None: no cap).
EFFORT_BUDGETS: dict[str, int | None] = {"minimal": 256, "low": 1024, "medium": 4096, "high": None}


def thinking_key(chat_template: str | None) -> str | None:
    """The variable the template reads to switch thinking, or None if it has no switch."""
    if not chat_template:
        return None
    for key in THINKING_KEYS:
        if re.search(rf"\b{re.escape(key)}\b", chat_template):
            return key
    return None


@dataclass(frozen=True)
class ThinkingDecision:
    """Whether to think (None: the template's default), its budget, and the template kwargs."""

    enabled: bool | None
    budget: int | None
    template_kwargs: dict[str, Any]


def decide_thinking(
    chat_template: str | None,
    *,
    thinking: Any = None,
    reasoning_effort: str | None = None,
    enable_thinking: bool | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
    thinking_token_budget: int | None = None,
    default_budget: int | None = None,
) -> ThinkingDecision:
    """Map request fields onto the template's switch and a budget.

    Precedence: explicit ``chat_template_kwargs`` > ``enable_thinking`` > Anthropic
    ``thinking`` ({"type": "enabled"|"disabled", "budget_tokens": N} or a bool) >
    ``reasoning_effort`` ("none" disables; others set budgets).
    """
    enabled: bool | None = None
    budget = thinking_token_budget
    if reasoning_effort is not None:
        if reasoning_effort == "none":
            enabled = False
        else:
            enabled = True
            if reasoning_effort not in EFFORT_BUDGETS:
                raise ValueError(
                    f"unknown reasoning_effort {reasoning_effort!r}; valid: none, "
                    + ", ".join(EFFORT_BUDGETS)
                )
            budget = budget if budget is not None else EFFORT_BUDGETS[reasoning_effort]
    if isinstance(thinking, dict):
        enabled = thinking.get("type") != "disabled"
        if enabled and thinking.get("budget_tokens") is not None:
            budget = int(thinking["budget_tokens"])
    elif isinstance(thinking, bool):
        enabled = thinking
    if enable_thinking is not None:
        enabled = enable_thinking
    key = thinking_key(chat_template)
    kwargs: dict[str, Any] = {}
    if key is not None and enabled is not None:
        kwargs[key] = enabled
    for name, value in (chat_template_kwargs or {}).items():
        kwargs[name] = value
        if name in THINKING_KEYS and isinstance(value, bool):
            enabled = value
    if enabled is False:
        budget = None
    elif budget is None:
        budget = default_budget
    return ThinkingDecision(enabled, budget, kwargs)
