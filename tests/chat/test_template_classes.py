"""Real template classes that used to break: each minimal template (tests/templates/, the
models they stand for in the README there) must round-trip through `vllm-mlx template`, and
the server-side behaviour behind it is checked in-process."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from shared import CITY_TOOLS, tool_history
from tiny_models import build_tiny_tokenizer

from vllm_mlx.chat.stream import parse_output
from vllm_mlx.chat.template import render_chat
from vllm_mlx.chat.template_probe import profile_template
from vllm_mlx.cli import main
from vllm_mlx.reasoning import ReasoningParserManager
from vllm_mlx.runtime import choose_parsers
from vllm_mlx.tool_parsers import ToolParserManager

TEMPLATES = Path(__file__).parent.parent / "templates"


class WithTemplate:
    """The tiny tokenizer (its vocabulary has ``<think>``) carrying another chat template."""

    def __init__(self, name: str):
        self._tokenizer = build_tiny_tokenizer()
        self.chat_template = (TEMPLATES / name).read_text()

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


@pytest.mark.parametrize(
    ("name", "tool", "reasoning"),
    [
        ("calls_only_without_content.jinja", "deepseek_v3", "qwen3"),
        ("user_after_result_rejected.jinja", "mistral", "none"),
        ("granite_think_response.jinja", "granite", "granite"),
        ("apriel_final_response.jinja", "apriel", "apriel"),
        ("no_tool_roles.jinja", "hermes", "none"),
        ("functionary_recipient.jinja", "functionary_v3", "none"),
        ("lfm2_json_calls.jinja", "lfm2", "none"),
        ("coder_no_thinking.jinja", "qwen3_coder", "none"),
    ],
)
def test_the_template_round_trips(name, tool, reasoning):
    result = CliRunner().invoke(main, ["template", str(TEMPLATES / name)])
    assert f"tool calls: {tool} (" in result.output
    assert f"reasoning: {reasoning} (" in result.output
    assert result.exit_code == 0 and result.output.rstrip().endswith("PASS"), result.output


def test_calls_written_only_for_none_content_reach_the_prompt_in_v3_syntax():
    text = render_chat(
        WithTemplate("calls_only_without_content.jinja"), tool_history(), tools=CITY_TOOLS
    ).text
    assert "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n" in text
    called = parse_output(
        text[text.index("<｜tool▁calls▁begin｜>") : text.index("<｜end▁of▁sentence｜>")],
        reasoning_format=None,
        tool_format=ToolParserManager.format("deepseek_v3"),
        tools=CITY_TOOLS,
    )
    assert [(c.name, c.arguments) for c in called.tool_calls] == [
        ("get_weather", '{"city": "Paris"}')
    ]


def test_a_user_turn_after_a_result_keeps_the_id_rule_visible():
    """The probe's follow-up straight after the result raises; the id rule is still found,
    so a client's ``call_1`` renders (mapped) and the user turn gets an answer before it."""
    profile = profile_template((TEMPLATES / "user_after_result_rejected.jinja").read_text(), {})
    assert profile.id_style == "alnum9" and profile.answer_after_results
    text = render_chat(
        WithTemplate("user_after_result_rejected.jinja"), tool_history(), tools=CITY_TOOLS
    ).text
    assert "call_1" not in text and '"call_id": "' in text
    assert "[/TOOL_RESULTS]</s>" in text and text.endswith("[/INST]")


def test_a_template_without_tool_roles_still_gets_the_results():
    """Gemma 2 raises on system and tool turns and on two user turns in a row."""
    history = [{"role": "system", "content": "Be brief."}, *tool_history()]
    text = render_chat(WithTemplate("no_tool_roles.jinja"), history, tools=CITY_TOOLS).text
    assert "Be brief." in text and "<tool_response>\n18C, sunny\n</tool_response>" in text
    assert '"name": "get_weather"' in text and text.count("<start_of_turn>user") == 2


def test_apriels_closing_wrapper_is_dropped_without_tools():
    answer = "Here are my reasoning steps:\nok[BEGIN FINAL RESPONSE]Paris.[END FINAL RESPONSE]"
    message = parse_output(
        answer, reasoning_format=ReasoningParserManager.format("apriel"), tool_format=None
    )
    assert (message.reasoning_content, message.content) == ("ok", "Paris.")


def test_a_non_thinking_coder_gets_no_reasoning_parser():
    tokenizer = WithTemplate("coder_no_thinking.jinja")
    assert "<think>" in tokenizer.get_added_vocab()
    choice = choose_parsers("Qwen/Qwen3-Coder-30B-A3B-Instruct", tokenizer)
    assert (choice.tool, choice.reasoning) == ("qwen3_coder", None)
