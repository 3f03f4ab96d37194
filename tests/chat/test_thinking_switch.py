"""The thinking switch is written under the key the template reads."""

from tiny_models import QWEN3_STYLE_CHAT_TEMPLATE, build_tiny_tokenizer

from vllm_mlx.chat.thinking_switch import EFFORTS, decide_thinking, thinking_key


def test_key_found_in_template_source():
    assert thinking_key(QWEN3_STYLE_CHAT_TEMPLATE) == "enable_thinking"
    assert thinking_key("{% if thinking %}<think>{% endif %}") == "thinking"
    assert thinking_key("{% if thinking_mode == 'on' %}x{% endif %}") == "thinking_mode"
    assert thinking_key("{{ messages }}") is None


def test_reasoning_effort_none_turns_thinking_off_in_the_rendered_prompt():
    decision = decide_thinking(QWEN3_STYLE_CHAT_TEMPLATE, effort="none")
    assert decision.enabled is False and decision.budget is None
    tokenizer = build_tiny_tokenizer()
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}],
        tokenize=False,
        add_generation_prompt=True,
        **decision.template_kwargs,
    )
    assert text.endswith("<think>\n\n</think>\n\n")


def test_budgets_and_precedence():
    template = "{% if thinking %}x{% endif %}"
    low = decide_thinking(template, effort="low")
    assert (low.enabled, low.budget, low.template_kwargs) == (True, 1024, {"thinking": True})
    anthropic = decide_thinking(template, enabled=True, budget=99)
    assert anthropic.budget == 99
    explicit = decide_thinking(template, effort="minimal", budget=99)
    assert (explicit.enabled, explicit.budget) == (True, 99)
    off = decide_thinking(template, enabled=False, budget=5)
    assert off.enabled is False and off.budget is None
    forced = decide_thinking(template, effort="high", template_kwargs={"thinking": False})
    assert forced.enabled is False and forced.template_kwargs == {"thinking": False}
    assert decide_thinking(None, default_budget=7).budget == 7


def test_one_effort_table():
    assert [decide_thinking(None, effort=e).budget for e in EFFORTS] == [
        None,
        256,
        1024,
        4096,
        None,
        None,
    ]
    assert decide_thinking(None, effort="none").enabled is False
