"""`vllm-mlx template`: the inspector's report on our minimal templates (tests/templates/),
run in-process through click with the embedded model's tokenizer carrying each template."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from vllm_mlx.cli import main
from vllm_mlx.models.loader import resolve_model

TEMPLATES = Path(__file__).parent.parent / "templates"


def inspect(name: str, *options: str):
    return CliRunner().invoke(main, ["template", str(TEMPLATES / name), *options])


def test_family_syntax_injection_round_trips():
    result = inspect("args_string_concat.jinja")
    assert result.exit_code == 0, result.output
    assert (
        "tool calls: deepseek_v31 (its marker in the rendered probe conversation)" in result.output
    )
    assert "tools: injected in a system message, the deepseek_v31 syntax" in result.output
    assert "arguments as JSON text" in result.output
    assert "<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>" in result.output
    assert result.output.rstrip().endswith("PASS")


def test_switch_and_tails_with_thinking_on_and_off():
    result = inspect("think_enable_thinking.jinja")
    assert "enable_thinking (true/false)" in result.output
    assert "thinking on:  '<|im_start|>assistant\\n<think>\\n'" in result.output
    assert "thinking off: '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n'" in result.output
    slash = inspect("think_slash_switch.jinja")
    assert "/think or /no_think appended to the system prompt" in slash.output
    assert "thinking off: '<SPECIAL_11>Assistant\\n<think></think>'" in slash.output


def test_no_family_falls_back_to_hermes_and_says_so():
    result = inspect("tools_never_printed.jinja")
    assert "tools: injected in a system message, the hermes syntax" in result.output
    assert "history calls: written as text, the hermes syntax" in result.output
    assert result.exit_code == 0 and result.output.rstrip().endswith("PASS")


def test_ids_and_system_role_are_reported():
    assert "call ids: mapped to the alnum9 shape" in inspect("mistral_id9.jinja").output
    no_system = inspect("no_system_role.jinja").output
    assert "system role: no (system text goes into the first user turn)" in no_system


def test_a_family_added_this_round_round_trips():
    """Phi-4-mini's functools list is read by the phi4_mini family."""
    result = inspect("args_string_printed.jinja")
    assert result.exit_code == 0 and result.output.rstrip().endswith("PASS")


@pytest.mark.parametrize("name", ["tools_message_field.jinja"])
def test_a_history_call_the_parser_cannot_read_fails(name):
    """The Gemma-like template prints JSON arguments where Gemma's parser reads its own
    syntax: it must say FAIL, exit status 1."""
    result = inspect(name)
    assert result.exit_code == 1 and result.output.rstrip().endswith("FAIL")


def test_a_given_parser_is_used_and_an_unknown_one_is_a_usage_error():
    given = inspect("markers_from_expressions.jinja", "--tool-call-parser", "qwen")
    assert "tool calls: hermes (given)" in given.output
    bad = inspect("markers_from_expressions.jinja", "--tool-call-parser", "nope")
    assert bad.exit_code == 2 and "unknown tool-call parser" in bad.output


def test_a_model_folder_is_inspected():
    """The embedded default model (SmolLM2: ChatML without tool support)."""
    folder = str(resolve_model(None, progress=False))
    result = CliRunner().invoke(main, ["template", folder])
    assert "tool calls: hermes (no tool-call markers found: the Hermes fallback)" in result.output
    assert "tool results: as <tool_response> user turns" in result.output
    assert result.exit_code == 0 and result.output.rstrip().endswith("PASS")
