"""The families added for issue 11: real outputs, names peers use, detection, forced calls,
and their conformance-corpus cases.

Real-output texts follow the formats documented in docs/parsers.md (sources there); the
corpus cases come from tests/tool_parsers/corpus (each names its peer source).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from parser_cases import WEATHER_TOOLS, assert_same_in_every_mode, calls_of, parse, shape

from vllm_mlx.families.catalog import TOOL_CALL_FORMATS
from vllm_mlx.reasoning import ReasoningParserManager
from vllm_mlx.tool_parsers import ToolParserManager

sys.path.insert(0, str(Path(__file__).parent))

# The families issue 11 added
NEW_TOOL_FAMILIES = [
    "seed_oss",
    "step3",
    "step3p5",
    "poolside_v1",
    "nemotron",
    "apriel",
    "phi4_mini",
    "xlam",
    "lfm2",
    "apertus",
    "deepseek_v32",
    "command_r",
    "functionary_v3",
    "functionary_v31",
    "minimax_m3",
]
NEW_REASONING_FAMILIES = [
    "think",
    "poolside_v1",
    "step3p5",
    "step3",
    "nemotron_v3",
    "kimi_k25",
    "kimi",
    "minimax_m2_append_think",
    "minimax_m2",
    "deepseek_v31",
    "command_r",
    "apriel",
    "granite",
]
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


def test_prompt_opened_reasoning():
    apriel = assert_same_in_every_mode(
        "Think.\n[BEGIN FINAL RESPONSE]\nHi.[END FINAL RESPONSE]",
        "apriel",
        "apriel",
        prompt_tail="<|begin_assistant|>\nHere are my reasoning steps:\n",
    )
    assert shape(apriel)[:2] == ("Think.\n", "Hi.")
    poolside = assert_same_in_every_mode(
        "plan</think>\nDone.", None, "poolside_v1", prompt_tail="<think>\n"
    )
    assert shape(poolside)[:2] == ("plan", "Done.")


def test_model_ids_are_kept():
    msg = assert_same_in_every_mode(
        '<|START_ACTION|>{"tool_call_id": "7", "tool_name": "noop", "parameters": {}}'
        "<|END_ACTION|>",
        "command_r",
    )
    assert [c.id for c in msg.tool_calls] == ["7"]


NAMES = {
    "tool": {
        "functionary": "functionary_v3",
        "meetkai": "functionary_v3",
        "nemotron": "nemotron",
        "nemotron_json": "nemotron",
        "poolside_v1": "poolside_v1",
        "step3p5": "step3p5",
        "step3": "step3",
        "xlam": "xlam",
        "deepseek_v32": "deepseek_v32",
        "deepseek32": "deepseek_v32",
        "deepseek_v4": "deepseek_v32",
        "seed_oss": "seed_oss",
        "cohere": "command_r",
        "command_r": "command_r",
        "cohere_command3": "command_r",
        "lfm2": "lfm2",
        "phi4_mini_json": "phi4_mini",
        "apriel": "apriel",
        "apertus": "apertus",
    },
    "reasoning": {
        "poolside_v1": "poolside_v1",
        "step3p5": "step3p5",
        "step3": "step3",
        "think": "think",
        "command_r": "command_r",
        "cohere_cmd": "command_r",
        "cohere_command3": "command_r",
        "apriel": "apriel",
        "granite": "granite",
        "nemotron_v3": "nemotron_v3",
        "nano_v3": "nemotron_v3",
        "kimi_k2": "kimi_k25",
        "kimi_k25": "kimi_k25",
        "kimi": "kimi",
        "minimax_m2": "minimax_m2",
        "minimax_m2_append_think": "minimax_m2_append_think",
        "deepseek_v3": "deepseek_v31",
        "deepseek_v31": "deepseek_v31",
    },
}


def test_peer_names_resolve():
    for name, family in NAMES["tool"].items():
        assert ToolParserManager.resolve(name) == family, name
    for name, family in NAMES["reasoning"].items():
        assert ReasoningParserManager.resolve(name) == family, name


@pytest.mark.parametrize(
    ("model", "template", "tool", "reasoning"),
    [
        ("ByteDance-Seed/Seed-OSS-36B", "{{ '<seed:tool_call>' }}<function=", "seed_oss", None),
        ("deepseek-ai/DeepSeek-V3.2", "{% set t = '｜DSML｜' %}<think>", "deepseek_v32", None),
        ("nvidia/NVIDIA-Nemotron-Nano-9B-v2", "<TOOLCALL>[", "nemotron", "nemotron_v3"),
        ("c4ai-command-r7b", "<|START_ACTION|><|START_THINKING|>", "command_r", "command_r"),
        (
            "ServiceNow/Apriel-1.6",
            "<tool_calls> <tool_call> [BEGIN FINAL RESPONSE]",
            "apriel",
            "apriel",
        ),
        ("microsoft/Phi-4-mini", "<|tool_call|>{{ x }}<|/tool_call|>", "phi4_mini", None),
        ("LiquidAI/LFM2-1.2B", "<|tool_call_start|>", "lfm2", None),
        ("meetkai/functionary-small-v3.2", None, "functionary_v3", None),
        ("meetkai/functionary-medium-v3.1", None, "functionary_v31", None),
        ("stepfun-ai/step3", "<steptml:invoke", "step3", "step3"),
        ("poolside/Laguna", None, "poolside_v1", "poolside_v1"),
        ("Salesforce/xLAM-2-8b-fc-r", None, "xlam", None),
        ("swiss-ai/Apertus-8B", "<|tools_prefix|>", "apertus", None),
    ],
)
def test_detection(model, template, tool, reasoning):
    assert ToolParserManager.detect(model, template, []) == tool
    if reasoning:
        assert ReasoningParserManager.detect(model, template, []) == reasoning


def test_counts_reach_smg():
    """Issue 11's target: at least as many families as SMG registers."""
    assert len(ToolParserManager.names()) >= 24
    assert len(ReasoningParserManager.names()) >= 19
    assert set(NEW_REASONING_FAMILIES) <= set(ReasoningParserManager.names())


# -- forced calls: every new family has a grammar, and it refuses what the schema forbids ---

MALFORMED = {
    "seed_oss": "<seed:tool_call>\n<function=get_weather>\n<parameter=days>x</parameter>\n"
    "</function>\n</seed:tool_call>",
    "deepseek_v32": '<｜DSML｜function_calls>\n<｜DSML｜invoke name="nope">\n</｜DSML｜invoke>\n'
    "</｜DSML｜function_calls>",
    "nemotron": '<TOOLCALL>[{"name": "get_weather", "arguments": {"days": "x"}}]</TOOLCALL>',
    "command_r": '<|START_ACTION|>[\n{"tool_call_id": "0", "tool_name": "nope", "parameters": {}}'
    "\n]<|END_ACTION|>",
    "lfm2": "<|tool_call_start|>\n[get_weather(days='x')]\n<|tool_call_end|>",
    "functionary_v3": '>>>get_weather\n{"days": "x"}',
    "apertus": '<|tools_prefix|>[{"nope": {}}]<|tools_suffix|>',
}


@pytest.fixture(scope="module")
def tokenizer():
    from tiny_models import build_tiny_tokenizer

    return build_tiny_tokenizer()


@pytest.mark.parametrize("family", NEW_TOOL_FAMILIES)
def test_every_new_family_can_be_forced(tokenizer, family):
    from constrained.forcing import accepts, matcher

    fmt = TOOL_CALL_FORMATS[family]
    calls = [("get_weather", {"city": "Paris", "days": 2}), ("noop", {})]
    for variant in (fmt, *fmt.variants):
        assert accepts(tokenizer, matcher(tokenizer, family), variant.render_calls(calls))
    if family in MALFORMED:
        assert not accepts(tokenizer, matcher(tokenizer, family), MALFORMED[family])


@pytest.mark.parametrize("family", NEW_TOOL_FAMILIES)
def test_random_weights_make_calls_the_parser_reads_back(tokenizer, family):
    """A forced call from a random-weight model parses back as schema-valid calls."""
    import jsonschema
    from constrained.forcing import SCHEMAS, TOOLS, sample
    from tiny_models import build_tiny_model

    from vllm_mlx.constrained import build_logits_processors

    model = build_tiny_model(tokenizer, seed=3)
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        processors = build_logits_processors(
            tokenizer,
            tool_choice=choice,
            tools=TOOLS,
            tool_format=TOOL_CALL_FORMATS[family],
            parallel_tool_calls=False,
        )
        text = sample(model, tokenizer, processors, seed=0)
        message = parse(text, family, tools=TOOLS)
        assert message.tool_calls and not message.content, text
        for call in message.tool_calls:
            jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
