"""Parser registries (names, aliases, detection) and the `vllm-mlx parse` command."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from vllm_mlx.cli import main
from vllm_mlx.families.registry import UnknownParserError
from vllm_mlx.reasoning import ReasoningParserManager
from vllm_mlx.runtime import select_formats
from vllm_mlx.tool_parsers import ToolParserManager

HERMES_OUTPUT = (
    "<think>plan</think>\n\nSure.\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
)


def test_names_and_aliases():
    assert {"qwen3", "deepseek_r1", "glm45", "mistral", "gemma4", "harmony", "seed_oss"} <= set(
        ReasoningParserManager.names()
    )
    # at least as many families as SMG registers: 24 tool-call, 19 reasoning
    assert len(ToolParserManager.names()) >= 24
    assert len(ReasoningParserManager.names()) >= 19
    assert ReasoningParserManager.resolve("GPT-OSS") == "harmony"
    assert ReasoningParserManager.resolve("glm4") == "glm45"
    assert ToolParserManager.resolve("gpt_oss") == "harmony"
    assert ToolParserManager.resolve("qwen") == "hermes"


# Every name upstream vllm-mlx accepts, with the family it means here (drop-in
# names; the families not implemented yet are missing on purpose: functionary, poolside_v1,
# xlam as tool names; poolside_v1 as a reasoning name).
UPSTREAM_TOOL_NAMES = {
    "deepseek": "deepseek_v3",
    "gemma4": "gemma4",
    "glm47": "glm45",
    "granite": "granite",
    "harmony": "harmony",
    "hermes": "hermes",
    "kimi": "kimi_k2",
    "llama": "llama3_json",
    "llama4": "llama3_json",
    "minimax": "minimax_m2",
    "mistral": "mistral",
    "nemotron": "nemotron",
    "qwen": "hermes",
    "qwen3_xml": "qwen3_coder",
    "step3p5": "step3p5",
}
UPSTREAM_REASONING_NAMES = {
    "deepseek_r1": "deepseek_r1",
    "gemma4": "gemma4",
    "glm4": "glm45",
    "gpt_oss": "harmony",
    "harmony": "harmony",
    "mistral": "mistral",
    "qwen3": "qwen3",
    "step3p5": "step3p5",
    "think": "think",
}


@pytest.mark.parametrize(("name", "family"), UPSTREAM_TOOL_NAMES.items())
def test_upstream_tool_names_mean_their_family(name, family):
    assert ToolParserManager.resolve(name) == family


@pytest.mark.parametrize(("name", "family"), UPSTREAM_REASONING_NAMES.items())
def test_upstream_reasoning_names_mean_their_family(name, family):
    assert ReasoningParserManager.resolve(name) == family


# Names other servers use for the same families (vLLM, SGLang, SMG, llama.cpp)
PEER_NAMES = {
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
    for name, family in PEER_NAMES["tool"].items():
        assert ToolParserManager.resolve(name) == family, name
    for name, family in PEER_NAMES["reasoning"].items():
        assert ReasoningParserManager.resolve(name) == family, name


def test_auto_asks_for_detection_and_means_the_fallback_without_a_model():
    assert ToolParserManager.is_auto("auto") and ToolParserManager.is_auto("Generic")
    assert not ToolParserManager.is_auto("hermes")
    assert ToolParserManager.resolve("auto") == "hermes"


def test_deepseek_v32_is_not_deepseek_v31():
    """vLLM's deepseek_v32 is DSML, a different syntax: its own family, not an alias of V3.1."""
    assert ToolParserManager.resolve("deepseek_v32") == "deepseek_v32"
    assert ToolParserManager.format("deepseek_v32") is not ToolParserManager.format("deepseek_v31")


def test_runtime_detects_the_family_for_auto():
    template = "{{ '<|tool_calls_section_begin|>' }}"
    kimi = SimpleNamespace(
        name="some-model",
        chat_template=template,
        tokenizer=SimpleNamespace(all_special_tokens=[], chat_template=template),
    )
    _, tool = select_formats(kimi, None, "auto")
    assert tool is not None and tool.name == "kimi_k2"
    plain = SimpleNamespace(
        name="x", chat_template="", tokenizer=SimpleNamespace(all_special_tokens=[])
    )
    assert select_formats(plain, None, "generic")[1].name == "hermes"


def test_unknown_name_lists_valid_names():
    with pytest.raises(UnknownParserError) as err:
        ToolParserManager.resolve("nope")
    assert isinstance(err.value, ValueError) and "hermes" in str(err.value)


def _run(args, stdin):
    return CliRunner().invoke(main, ["parse", *args], input=stdin)


def test_parse_single_input_streaming_equals_whole():
    args = ["--tool-call-parser", "hermes", "--reasoning-parser", "qwen3"]
    whole = _run(args, HERMES_OUTPUT)
    chunked = _run([*args, "--chunk-size", "3"], HERMES_OUTPUT)
    assert whole.exit_code == 0 and chunked.exit_code == 0, whole.output
    a, b = json.loads(whole.output), json.loads(chunked.output)
    assert a["reasoning_content"] == "plan" and a["content"] == "Sure."
    assert a["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    }
    assert a["tool_calls"][0]["id"].startswith("call_")
    for m in (a, b):
        for call in m["tool_calls"]:
            call.pop("id")
    assert a == b


def test_parse_tools_file_and_prompt_tail(tmp_path):
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
            },
        }
    ]
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(tools))
    text = (
        "x</think><tool_call>\n<function=f>\n<parameter=n>\n5\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    result = _run(
        [
            "--tool-call-parser",
            "qwen3_coder",
            "--reasoning-parser",
            "qwen3",
            "--tools",
            str(path),
            "--prompt-tail",
            "<think>\n",
        ],
        text,
    )
    out = json.loads(result.output)
    assert out["reasoning_content"] == "x"
    assert out["tool_calls"][0]["function"]["arguments"] == '{"n": 5}'


def test_parse_unknown_parser_is_an_error_listing_names():
    result = _run(["--tool-call-parser", "bogus"], "hi")
    assert result.exit_code != 0 and "hermes" in result.output


def test_parse_jsonl_reports_per_line_errors():
    lines = [
        {"text": HERMES_OUTPUT, "tool_call_parser": "hermes", "reasoning_parser": "qwen3"},
        {"text": "plain"},
        {"text": "x", "reasoning_parser": "bogus"},
        {"no_text": 1},
    ]
    stdin = "\n".join(json.dumps(x) for x in lines) + "\n"
    result = _run(["--jsonl", "--chunk-size", "2"], stdin)
    outs = [json.loads(line) for line in result.output.splitlines()]
    assert outs[0]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert outs[1] == {"reasoning_content": None, "content": "plain", "tool_calls": []}
    assert "error" in outs[2] and "qwen3" in outs[2]["error"]
    assert "error" in outs[3]
