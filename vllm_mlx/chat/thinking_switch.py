"""Thinking on/off and effort: written under the switch the model's chat template actually reads.

Templates disagree on the switch: a variable (``enable_thinking`` for Qwen3, ``thinking`` for
DeepSeek V3.1, ``thinking_mode``, ``reasoning_effort`` for gpt-oss, ``thinking_budget`` for
Seed-OSS), or ``/think`` / ``/no_think`` in the system prompt (Nemotron). Passing the wrong one
is silently ignored, and comments or prose mention these words too, so the switch is found
from the parsed template (the variables it reads, the string constants it compares), and the
request's thinking intent (on/off, budget, effort; see ``vllm_mlx.request.Thinking``) is mapped
onto it, for every API surface alike. Without a switch, budgets still hold (the thinking-aware
processor counts tokens whatever the template does).
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from typing import Any

from jinja2 import meta, nodes

from .jinja_sandbox import parse_template

log = logging.getLogger(__name__)

# Boolean template variables that switch thinking, in order of preference.
THINKING_KEYS = ("enable_thinking", "thinking", "thinking_mode", "enable_reasoning", "reasoning")
EFFORT_KEY = "reasoning_effort"  # gpt-oss: the model's own effort control (low/medium/high)
BUDGET_KEY = "thinking_budget"  # Seed-OSS: 0 = off, -1 = unlimited, N = a budget
SLASH_SWITCH = "/think"  # Nemotron: /think or /no_think in the system prompt
# "/think" or "/no_think" as a word of its own (not the "/think" inside "</think>").
_SLASH_TEXT = re.compile(r"(?<![<\w])/(no_?)?think\b")
# The request's effort in gpt-oss's three levels.
_HARMONY_EFFORTS = {"none": "low", "minimal": "low", "xhigh": "high"}

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


@functools.lru_cache(maxsize=64)
def _switch_of(source: str) -> str | None:
    try:
        tree = parse_template(source)
    except Exception:  # a template that does not parse has no switch to find
        return None
    reads = meta.find_undeclared_variables(tree)
    for key in (*THINKING_KEYS, EFFORT_KEY, BUDGET_KEY):
        if key in reads:
            return key
    for const in tree.find_all(nodes.Const):
        if isinstance(const.value, str) and _SLASH_TEXT.search(const.value):
            return SLASH_SWITCH
    return None


def thinking_key(chat_template: Any) -> str | None:
    """The switch the template reads: a variable name, ``SLASH_SWITCH``, or None. A model
    with several named templates: the first switch any of them reads."""
    sources = [chat_template] if isinstance(chat_template, str) else []
    if isinstance(chat_template, dict):
        sources = [v for v in chat_template.values() if isinstance(v, str)]
    elif isinstance(chat_template, list):
        sources = [i["template"] for i in chat_template if isinstance(i, dict) and "template" in i]
    for source in sources:
        if isinstance(source, str) and source and (key := _switch_of(source)) is not None:
            return key
    return None


@functools.lru_cache(maxsize=64)
def _log_no_switch(source_id: int) -> None:
    log.info(
        "the chat template has no thinking switch: thinking on/off is left to the model; "
        "thinking budgets are still enforced"
    )


class UnknownEffortError(ValueError):
    """A reasoning effort outside ``EFFORTS``."""


@dataclass(frozen=True)
class ThinkingDecision:
    """Whether to think (None: the template's default), its budget, and the template kwargs."""

    enabled: bool | None
    budget: int | None
    template_kwargs: dict[str, Any]
    system_switch: str | None = None  # text for the system prompt (``/no_think``)


def decide_thinking(
    chat_template: Any,
    *,
    enabled: bool | None = None,
    budget: int | None = None,
    effort: str | None = None,
    template_kwargs: dict[str, Any] | None = None,
    default_budget: int | None = None,
    default_kwargs: dict[str, Any] | None = None,
) -> ThinkingDecision:
    """Map a request's thinking intent onto the template's switch and a budget.

    Precedence: explicit ``template_kwargs`` > ``enabled`` / ``budget`` > ``effort``
    ("none" disables; the others enable with ``EFFORT_BUDGETS``) > the operator's
    ``default_kwargs``. ValueError for an unknown effort or a negative budget.
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
    kwargs: dict[str, Any] = {}
    for name, value in (default_kwargs or {}).items():
        kwargs[name] = value
        if enabled is None and name in THINKING_KEYS and isinstance(value, bool):
            enabled = value
    key = thinking_key(chat_template)
    system_switch = None
    if key in THINKING_KEYS and enabled is not None:
        kwargs[key] = enabled
    elif key == EFFORT_KEY and (effort is not None or enabled is False):
        chosen = effort if effort is not None else "low"
        kwargs[key] = _HARMONY_EFFORTS.get(chosen, chosen)
    elif key == BUDGET_KEY and (enabled is False or budget is not None):
        kwargs[key] = 0 if enabled is False else budget
    elif key == SLASH_SWITCH and enabled is not None:
        system_switch = "/think" if enabled else "/no_think"
    elif key is None and chat_template and (enabled is not None or budget is not None):
        _log_no_switch(hash(str(chat_template)))
    for name, value in (template_kwargs or {}).items():
        kwargs[name] = value
        if name in THINKING_KEYS and isinstance(value, bool):
            enabled = value
    if enabled is False:
        budget = None
    elif budget is None:
        budget = default_budget
    return ThinkingDecision(enabled, budget, kwargs, system_switch)
