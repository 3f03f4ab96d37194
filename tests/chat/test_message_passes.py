"""Each message pass alone, and their order: what a template of a given profile is handed."""

from __future__ import annotations

import pytest
from shared import CITY_TOOLS, tool_history

from vllm_mlx.chat.message_passes import (
    PASSES,
    Fitting,
    alternating_turns,
    answer_after_results,
    calls_and_results_as_text,
    fit_messages,
    name_results_and_map_ids,
    system_into_user,
    system_switch,
    template_shapes,
    tools_in_messages,
)
from vllm_mlx.chat.template_probe import TemplateProfile
from vllm_mlx.tool_parsers import ToolParserManager

HISTORY = tool_history()[:4]  # system, user, the assistant's call, its result


def fitting(**profile) -> Fitting:
    return Fitting(TemplateProfile(**profile))


def test_results_get_their_calls_name_and_ids_the_templates_shape():
    named = name_results_and_map_ids(HISTORY, fitting())
    assert named[3]["name"] == "get_weather" and named[3]["tool_call_id"] == "call_1"
    mapped = name_results_and_map_ids(HISTORY, fitting(id_style="alnum9"))
    new_id = mapped[2]["tool_calls"][0]["id"]
    assert new_id != "call_1" and len(new_id) == 9 and new_id.isalnum()
    assert mapped[3]["tool_call_id"] == new_id
    kimi = Fitting(TemplateProfile(), tool_format=ToolParserManager.format("kimi_k2"))
    assert name_results_and_map_ids(HISTORY, kimi)[2]["tool_calls"][0]["id"].startswith(
        "functions.get_weather:"
    )
    assert HISTORY[3] == {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"}


def test_calls_and_results_a_template_drops_become_text():
    assert calls_and_results_as_text(HISTORY, fitting()) is HISTORY
    plain = calls_and_results_as_text(HISTORY, fitting(shows_calls=False, shows_results=False))
    assert "tool_calls" not in plain[2] and '"get_weather"' in plain[2]["content"]
    assert plain[3] == {"role": "user", "content": "<tool_response>\n18C, sunny\n</tool_response>"}
    only_results = calls_and_results_as_text(HISTORY, fitting(shows_results=False))
    assert only_results[2] is HISTORY[2] and only_results[3]["role"] == "user"


def test_turn_orders_a_template_insists_on():
    follow_up = tool_history()[1:]  # user, call, result, user
    answered = answer_after_results(follow_up, fitting(answer_after_results=True))
    assert [m["role"] for m in answered] == ["user", "assistant", "tool", "assistant", "user"]
    assert answered[3] == {"role": "assistant", "content": ""}
    assert answer_after_results(follow_up, fitting()) is follow_up
    as_text = calls_and_results_as_text(follow_up, fitting(shows_results=False))
    merged = alternating_turns(as_text, fitting(alternating=True, shows_results=False))
    assert [m["role"] for m in merged] == ["user", "assistant", "user"]
    assert merged[2]["content"].endswith("</tool_response>\n\nAnd tomorrow?")
    assert alternating_turns(as_text, fitting()) is as_text


def test_the_switch_ends_the_system_prompt():
    switched = system_switch(HISTORY, Fitting(TemplateProfile(), system_switch="/no_think"))
    assert switched[0] == {"role": "system", "content": "Be brief.\n/no_think"}
    added = system_switch(HISTORY[1:], Fitting(TemplateProfile(), system_switch="/no_think"))
    assert added[0] == {"role": "system", "content": "/no_think"} and added[1:] == HISTORY[1:]
    assert system_switch(HISTORY, fitting()) is HISTORY


def test_tools_go_where_the_template_reads_them():
    unread = tools_in_messages(HISTORY, Fitting(TemplateProfile(tools_via=None), CITY_TOOLS))
    assert unread[0]["content"].startswith("Be brief.\n\n# Tools")
    assert '"get_weather"' in unread[0]["content"]
    on_message = tools_in_messages(
        HISTORY, Fitting(TemplateProfile(tools_via="message"), CITY_TOOLS)
    )
    assert on_message[0]["tools"] == CITY_TOOLS and on_message[1:] == HISTORY[1:]
    variable = Fitting(TemplateProfile(tools_via="tools"), CITY_TOOLS)
    assert tools_in_messages(HISTORY, variable) is HISTORY  # the renderer passes `tools`


def test_system_text_tops_the_first_user_turn_without_a_system_role():
    merged = system_into_user(HISTORY, fitting(system_role=False))
    assert merged[0] == {"role": "user", "content": "Be brief.\n\nWeather in Paris?"}
    assert [m["role"] for m in merged] == ["user", "assistant", "tool"]
    alone = system_into_user(HISTORY[:1], fitting(system_role=False))
    assert alone == [{"role": "user", "content": "Be brief."}]
    assert system_into_user(HISTORY, fitting()) is HISTORY


@pytest.mark.parametrize(("form", "arguments"), [("object", {"city": "Paris"}), ("string", None)])
def test_messages_take_the_shapes_templates_expect(form, arguments):
    reasoned = {**HISTORY[2], "reasoning_content": "look it up"}
    (shaped,) = template_shapes([reasoned], fitting(args_form=form))
    assert shaped["content"] == "" and shaped["thinking"] == "look it up"
    got = shaped["tool_calls"][0]["function"]["arguments"]
    assert got == (arguments if arguments is not None else '{"city": "Paris"}')
    (none,) = template_shapes([HISTORY[2]], fitting(args_form=form, call_content_none=True))
    assert none["content"] is None  # a template that writes calls only for none content


def test_the_passes_run_in_order():
    """The tool description lands in the system text before that text moves into the user
    turn, and the switch follows it there; results are named before they become text."""
    assert PASSES[-1] is template_shapes
    profile = TemplateProfile(system_role=False, tools_via=None, shows_calls=False)
    fit = Fitting(profile, CITY_TOOLS, None, "/no_think")
    messages = fit_messages(tool_history(), fit)
    first = messages[0]
    assert first["role"] == "user"
    assert first["content"].index("/no_think") < first["content"].index("# Tools")
    assert all(m["role"] in ("user", "assistant") for m in messages)
    assert all(isinstance(m["content"], str) for m in messages)
