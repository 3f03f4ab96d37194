"""Real model outputs of the families without a test of their own in
test_tool_families.py: the formats documented in docs/parsers.md (sources there), each
parsed the same in every mode into its reasoning, content and calls."""

from __future__ import annotations

import pytest
from parser_cases import WEATHER_TOOLS, assert_same_in_every_mode, calls_of

CASES = [
    # Seed-OSS: reasoning, then a call; a typed parameter; one layout newline is markup
    (
        "seed_oss",
        "seed_oss",
        "<seed:think>Need the weather.</seed:think>\nChecking.\n<seed:tool_call>\n"
        "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>3</parameter>\n</function>\n</seed:tool_call>",
        ("Need the weather.", "Checking.", [("get_weather", {"city": "Paris", "days": 3})]),
    ),
    # DeepSeek V3.2 DSML: string="false" is JSON, string="true" typed by the schema
    (
        "deepseek_v32",
        None,
        '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
        '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="days" string="true">2</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="opts" string="false">{"a": [1]}</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n</｜DSML｜function_calls><｜end▁of▁sentence｜>",
        (None, None, [("get_weather", {"city": "Paris", "days": 2, "opts": {"a": [1]}})]),
    ),
    # DeepSeek V4: the same invoke in a tool_calls block, with a JSON body
    (
        "deepseek_v4",
        None,
        'Sure.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="noop">\n{}\n</｜DSML｜invoke>\n'
        "</｜DSML｜tool_calls>",
        (None, "Sure.", [("noop", {})]),
    ),
    # Nemotron Nano v2: a list, a single object, the turn-end token dropped
    (
        "nemotron",
        None,
        '<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}, '
        '{"name": "noop", "arguments": {}}]</TOOLCALL><SPECIAL_12>',
        (None, None, [("get_weather", {"city": "Paris"}), ("noop", {})]),
    ),
    (
        "nemotron_json",
        "nemotron_v3",
        '<think>\nplan\n</think>\n<TOOLCALL>{"name": "noop", "arguments": {}}</TOOLCALL>',
        ("\nplan\n", None, [("noop", {})]),
    ),
    # Nemotron 3 Nano writes Qwen3-Coder XML under the same name
    (
        "nemotron",
        None,
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "</function>\n</tool_call>",
        (None, None, [("get_weather", {"city": "Paris"})]),
    ),
    # Command R7B: thinking, an action list with the model's ids, answer markers dropped
    (
        "command_r",
        "command_r",
        "<|START_THINKING|>Look it up.<|END_THINKING|><|START_ACTION|>[\n"
        '    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}},\n'
        '    {"tool_call_id": "1", "tool_name": "noop"}\n]<|END_ACTION|>',
        ("Look it up.", None, [("get_weather", {"city": "Paris"}), ("noop", {})]),
    ),
    (
        "cohere",
        "cohere_cmd",
        "<|START_THINKING|>Easy.<|END_THINKING|><|START_RESPONSE|>Hello!<|END_RESPONSE|>",
        ("Easy.", "Hello!", []),
    ),
    # Apriel 1.6: reasoning opened by the prompt, ended by [BEGIN FINAL RESPONSE]
    (
        "apriel",
        "apriel",
        "Think.\n[BEGIN FINAL RESPONSE]\n"
        '<tool_calls>[{"name": "noop", "arguments": {}}]</tool_calls><|end|>',
        ("Think.\n", None, [("noop", {})]),
    ),
    # Phi-4-mini: functools list (no closing marker) and llama.cpp's <|tool_call|> form
    (
        "phi4_mini",
        None,
        'functools[{"name": "get_weather", "arguments": {"city": "Paris"}}]',
        (None, None, [("get_weather", {"city": "Paris"})]),
    ),
    (
        "phi4_mini_json",
        None,
        'Sure. <|tool_call|>{"name": "noop", "arguments": {}}<|/tool_call|>',
        (None, "Sure.", [("noop", {})]),
    ),
    # Functionary v3.2: the prompt ends with >>>, so the output starts with a recipient
    (
        "functionary",
        None,
        'all\nLet me check.\n>>>get_weather\n{"city": "Paris"}',
        (None, "Let me check.", [("get_weather", {"city": "Paris"})]),
    ),
    (
        "meetkai",
        None,
        "python\nprint(1)\n>>>noop\n{}",
        (None, None, [("python", {"code": "print(1)"}), ("noop", {})]),
    ),
    (
        "functionary_v31",
        None,
        "Hi<function=noop>{}</function>",
        (None, "Hi", [("noop", {})]),
    ),
    # LFM2: Python calls, sets as lists (in written order), Python literals
    (
        "lfm2",
        "qwen3",
        "<think>plan</think><|tool_call_start|>[get_weather(city='Paris', tags={'b', 'a'}, "
        "metric=True, opts=None), noop()]<|tool_call_end|>",
        (
            "plan",
            None,
            [
                (
                    "get_weather",
                    {"city": "Paris", "tags": ["b", "a"], "metric": True, "opts": None},
                ),
                ("noop", {}),
            ],
        ),
    ),
    (
        "lfm2",
        None,
        "<|tool_call_start|>[noop(x=b'z')]<|tool_call_end|>",
        (None, "<|tool_call_start|>[noop(x=b'z')]<|tool_call_end|>", []),
    ),
    # Step-3: steptml invoke inside DeepSeek-like markers (ASCII underscores)
    (
        "step3",
        None,
        "<｜tool_calls_begin｜>\n<｜tool_call_begin｜>function<｜tool_sep｜>"
        '<steptml:invoke name="get_weather">\n<steptml:parameter name="days">4'
        "</steptml:parameter>\n</steptml:invoke><｜tool_call_end｜>\n<｜tool_calls_end｜>",
        (None, None, [("get_weather", {"days": 4})]),
    ),
    # Step 3.5: Qwen3-Coder XML with <think> opened by the template
    (
        "step3p5",
        "step3p5",
        "<think>hm</think>\n<tool_call>\n<function=noop>\n</function>\n</tool_call>",
        ("hm", None, [("noop", {})]),
    ),
    # Poolside v1: GLM-style keys, verbatim string values
    (
        "poolside_v1",
        "poolside_v1",
        "<think>plan</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
        "<arg_value>  Paris\n</arg_value>\n</tool_call>",
        ("plan", None, [("get_weather", {"city": "  Paris\n"})]),
    ),
    # xLAM: a bare list at the start, or a fenced one after prose
    (
        "xlam",
        None,
        '[{"name": "noop", "arguments": {}}]',
        (None, None, [("noop", {})]),
    ),
    (
        "xlam",
        None,
        'Here:\n```json\n[{"name": "noop", "arguments": {}}]\n```',
        (None, "Here:", [("noop", {})]),
    ),
    # Apertus: the name is the object's key
    (
        "apertus",
        None,
        '<|tools_prefix|>[{"get_weather": {"city": "Paris"}}]<|tools_suffix|>',
        (None, None, [("get_weather", {"city": "Paris"})]),
    ),
]


@pytest.mark.parametrize(("tool", "reasoning", "text", "want"), CASES)
def test_real_outputs(tool, reasoning, text, want):
    msg = assert_same_in_every_mode(text, tool, reasoning, tools=WEATHER_TOOLS)
    reasoning_text, content, calls = want
    assert (msg.reasoning_content, msg.content) == (reasoning_text, content)
    assert calls_of(msg) == calls
