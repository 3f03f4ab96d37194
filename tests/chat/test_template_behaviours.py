"""What the renderer does with the things real chat templates do.

Each test renders one of our minimal templates (tests/templates/, README there) through
`render_chat` with a tiny tokenizer carrying it: null content, enforced id shapes, tools the
template cannot show (injected in the family's own syntax), named templates, no system role,
argument forms, the thinking switch found from the parsed template, and detection from the
rendered probe conversation.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from shared import CITY_TOOLS, tool_history
from tiny_models import build_tiny_tokenizer

from vllm_mlx.chat.stream import parse_output
from vllm_mlx.chat.template import render_chat
from vllm_mlx.chat.template_probe import profile_template
from vllm_mlx.chat.thinking_switch import SLASH_SWITCH, decide_thinking, thinking_key
from vllm_mlx.runtime import choose_parsers
from vllm_mlx.tool_parsers import ToolParserManager

TEMPLATES = Path(__file__).parent.parent / "templates"


class WithTemplate:
    """The tiny tokenizer carrying another chat template."""

    def __init__(self, template):
        self._tokenizer = build_tiny_tokenizer()
        self.chat_template = template

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


def template(name: str):
    path = TEMPLATES / name
    if path.suffix == ".json":
        return json.loads(path.read_text())["chat_template"]
    return path.read_text()


def render(name: str, messages=None, **kwargs):
    return render_chat(WithTemplate(template(name)), messages or tool_history(), **kwargs)


# -- 1. content: null ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["content_null_in", "content_null_split", "content_null_concat", "content_null_tojson"],
)
def test_call_turns_with_null_content_render(name):
    text = render(f"{name}.jinja", tools=CITY_TOOLS).text
    assert "18C, sunny" in text and "And tomorrow?" in text
    assert "None" not in text
    if name == "content_null_tojson":
        assert "null" not in text and '<|assistant|>""' in text


def test_tool_results_get_the_called_functions_name():
    """OpenAI tool messages carry only ``tool_call_id``; the name comes from the call it
    answers, in the tool turn itself (the assistant's call shows it too)."""
    text = render("tool_result_needs_name.jinja", tools=CITY_TOOLS).text
    tool_turn = text.split("<|im_start|>tool\n", 1)[1].split("<|im_end|>", 1)[0]
    assert (
        tool_turn
        == '<tool_response>{"name": "get_weather", "content": "18C, sunny"}</tool_response>'
    )


# -- 2. ids in the template's shape --------------------------------------------------------


def test_client_ids_are_mapped_to_nine_alphanumerics_consistently():
    first = render("mistral_id9.jinja", tools=CITY_TOOLS).text
    ids = re.findall(r'"(?:id|call_id)": "([^"]*)"', first)
    assert len(ids) == 2 and ids[0] == ids[1]
    assert re.fullmatch(r"[A-Za-z0-9]{9}", ids[0])
    # the next turn renders the same history with the same id: the prefix stays stable
    later = tool_history() + [{"role": "assistant", "content": "Sunny too."}]
    assert ids[0] in render("mistral_id9.jinja", later, tools=CITY_TOOLS).text
    assert profile_template(template("mistral_id9.jinja"), {}).id_style == "alnum9"


def test_ids_the_template_accepts_are_kept():
    text = render("mistral_id9.jinja", tool_history("abcDEF123"), tools=CITY_TOOLS).text
    assert text.count("abcDEF123") == 2


def test_kimi_ids_are_written_as_the_models_own_call_names():
    kimi = ToolParserManager.format("kimi_k2")
    prints_ids = (
        "{% for m in messages %}{% for tc in m.tool_calls or [] %}[{{ tc.id }} "
        "{{ tc.function.name }}]{% endfor %}{% if m.role == 'tool' %}({{ m.tool_call_id }} "
        "{{ m.content }}){% endif %}{% endfor %}"
    )
    text = render_chat(WithTemplate(prints_ids), tool_history(), tool_format=kimi).text
    assert text == "[functions.get_weather:0 get_weather](functions.get_weather:0 18C, sunny)"
    plain = render_chat(WithTemplate(prints_ids), tool_history()).text
    assert plain == "[call_1 get_weather](call_1 18C, sunny)"


def test_the_server_generates_ids_in_the_familys_shape():
    mistral = ToolParserManager.format("mistral")
    output = '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]'
    message = parse_output(
        output, reasoning_format=None, tool_format=mistral, tools=CITY_TOOLS, id_style="alnum9"
    )
    assert re.fullmatch(r"[A-Za-z0-9]{9}", message.tool_calls[0].id)
    hermes = ToolParserManager.format("hermes")
    plain = parse_output(
        '<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>',
        reasoning_format=None,
        tool_format=hermes,
    )
    assert plain.tool_calls[0].id.startswith("call_")


# -- 3. tools the template does not print --------------------------------------------------


@pytest.mark.parametrize("name", ["tools_never_printed", "tools_mentioned_not_printed"])
def test_tools_a_template_cannot_show_are_injected_with_the_history(name):
    text = render(f"{name}.jinja", tools=CITY_TOOLS).text
    assert "Current weather for a city" in text and "<tool_call>" in text  # Hermes: no family
    assert '"city": "Paris"' in text and "18C, sunny" in text


@pytest.mark.parametrize("name", ["tools_custom_name", "tools_message_field"])
def test_tools_read_under_another_name_reach_the_prompt(name):
    text = render(f"{name}.jinja", tools=CITY_TOOLS).text
    assert "Current weather for a city" in text and "# Tools" not in text


def test_injected_tools_are_taught_in_the_familys_own_syntax():
    deepseek = ToolParserManager.format("deepseek_v31")
    text = render("args_string_concat.jinja", tools=CITY_TOOLS, tool_format=deepseek).text
    assert "<tool_call>" not in text
    example = text.split("exactly in this format", 1)[1]
    parsed = parse_output(
        example.split("\n", 1)[1], reasoning_format=None, tool_format=deepseek, tools=CITY_TOOLS
    )
    assert parsed.tool_calls[0].name == "get_weather"  # then the history call, natively


def test_tools_is_defined_gets_no_tools_variable_without_tools():
    text = render("tools_is_defined.jinja", tool_history()[:2]).text
    assert "Be brief." in text


# -- 4. named templates --------------------------------------------------------------------


def test_named_templates_pick_tool_use_when_tools_are_present():
    with_tools = render("named_templates.json", tools=CITY_TOOLS).text
    assert "<tools>" in with_tools and "# Tools" not in with_tools
    plain = render("named_templates.json", tool_history()[:2]).text
    assert "<tools>" not in plain
    as_dict = {item["name"]: item["template"] for item in template("named_templates.json")}
    assert "<tools>" in render_chat(WithTemplate(as_dict), tool_history(), tools=CITY_TOOLS).text
    assert decide_thinking(as_dict, enabled=False).template_kwargs == {}


# -- 5. no system role ---------------------------------------------------------------------


def test_system_text_moves_into_the_first_user_turn():
    text = render("no_system_role.jinja", tools=CITY_TOOLS).text
    first_user = text.split("<end_of_turn>")[0]
    assert "Be brief." in first_user and "Weather in Paris?" in first_user
    assert "Current weather for a city" in first_user  # the injected instructions too


# -- 6. arguments as objects or JSON text --------------------------------------------------


@pytest.mark.parametrize(
    ("name", "form"),
    [
        ("args_object_items", "object"),
        ("args_string_concat_tools", "string"),
        ("args_string_printed", "string"),
    ],
)
def test_history_arguments_take_the_form_the_template_expects(name, form):
    assert profile_template(template(f"{name}.jinja"), {}).args_form == form
    text = render(f"{name}.jinja", tools=CITY_TOOLS).text
    assert "{'city'" not in text and "Paris" in text


# -- 7. the thinking switch ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("think_enable_thinking", "enable_thinking"),
        ("think_thinking", "thinking"),
        ("think_thinking_mode", "thinking_mode"),
        ("think_word_in_prose", "reasoning"),
        ("think_reasoning_effort", "reasoning_effort"),
        ("think_budget", "thinking_budget"),
        ("think_slash_switch", SLASH_SWITCH),
        ("tail_always_printed", None),
        ("content_null_split", None),  # '</think>' in content is no switch
    ],
)
def test_the_switch_is_what_the_template_reads(name, key):
    assert thinking_key(template(f"{name}.jinja")) == key


def test_each_switch_gets_the_requests_intent():
    effort = template("think_reasoning_effort.jinja")
    assert decide_thinking(effort, effort="high").template_kwargs == {"reasoning_effort": "high"}
    assert decide_thinking(effort, effort="none").template_kwargs == {"reasoning_effort": "low"}
    budget = template("think_budget.jinja")
    assert decide_thinking(budget, enabled=False).template_kwargs == {"thinking_budget": 0}
    assert decide_thinking(budget, budget=300).template_kwargs == {"thinking_budget": 300}
    slash = decide_thinking(template("think_slash_switch.jinja"), enabled=False)
    assert slash.template_kwargs == {} and slash.system_switch == "/no_think"
    rendered = render("think_slash_switch.jinja", system_switch=slash.system_switch)
    assert rendered.tail.endswith("<think></think>") and "/no_think" not in rendered.text
    none = decide_thinking(template("tail_always_printed.jinja"), enabled=True, budget=50)
    assert none.template_kwargs == {} and none.budget == 50  # the processor still caps it


def test_a_printed_generation_prompt_is_still_the_tail():
    tail = render("tail_always_printed.jinja", tool_history()[:2]).tail
    assert tail.endswith("Here are my reasoning steps:")


# -- 8. detection from the rendered probe --------------------------------------------------


def test_markers_assembled_from_expressions_are_detected():
    choice = choose_parsers("some-model", WithTemplate(template("markers_from_expressions.jinja")))
    assert choice.tool == "hermes" and "rendered" in choice.tool_why


def test_without_markers_the_fallback_is_hermes():
    choice = choose_parsers("some-model", WithTemplate(template("tools_never_printed.jinja")))
    assert choice.tool == "hermes" and "rendered" not in choice.tool_why
