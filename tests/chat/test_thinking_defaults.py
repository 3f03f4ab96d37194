"""The operator's template variables are the lowest layer of the thinking decision: any
thinking field of the request, or its own variable, wins over them."""

from __future__ import annotations

from vllm_mlx.chat.thinking_switch import decide_thinking

TEMPLATE = "{% if enable_thinking is defined and not enable_thinking %}off{% endif %}"
OFF = {"enable_thinking": False, "persona": "terse"}


def test_the_defaults_apply_when_the_request_says_nothing():
    decision = decide_thinking(TEMPLATE, default_kwargs=OFF, default_budget=64)
    assert decision.enabled is False and decision.budget is None
    assert decision.template_kwargs == OFF


def test_a_request_field_wins_over_the_defaults():
    for decision in (
        decide_thinking(TEMPLATE, enabled=True, default_kwargs=OFF),
        decide_thinking(TEMPLATE, effort="high", default_kwargs=OFF),
        decide_thinking(TEMPLATE, template_kwargs={"enable_thinking": True}, default_kwargs=OFF),
    ):
        assert decision.enabled is True
        assert decision.template_kwargs == {**OFF, "enable_thinking": True}
