"""Family detection (families/catalog/detection.py through the managers): the model id, the
chat template's text and the tokenizer's special tokens name the tool-call and reasoning
families; an unknown model is left to the fallback."""

from __future__ import annotations

import pytest

from vllm_mlx.reasoning import ReasoningParserManager
from vllm_mlx.tool_parsers import ToolParserManager


@pytest.mark.parametrize(
    ("model", "template", "tokens", "tool", "reasoning"),
    [
        ("Qwen/Qwen3-8B", "{{ '<tool_call>' }} <think>", ["<think>"], "hermes", "qwen3"),
        ("Qwen3-Coder-30B", "<function=x><parameter=y>", [], "qwen3_coder", None),
        ("openai/gpt-oss-20b", None, ["<|channel|>", "<|call|>"], "harmony", "harmony"),
        ("moonshotai/Kimi-K2", None, ["<|tool_calls_section_begin|>"], "kimi_k2", None),
        ("zai/GLM-4.5-Air", "<arg_key> <think></think>", ["<think>"], "glm45", "glm45"),
        ("DeepSeek-R1", "function<｜tool▁sep｜>", ["<｜tool▁calls▁begin｜>"], "deepseek_v3", None),
        ("mystery-model", None, [], None, None),
        ("ByteDance-Seed/Seed-OSS-36B", "{{ '<seed:tool_call>' }}<function=", [], "seed_oss", None),
        ("deepseek-ai/DeepSeek-V3.2", "{% set t = '｜DSML｜' %}<think>", [], "deepseek_v32", None),
        ("nvidia/NVIDIA-Nemotron-Nano-9B-v2", "<TOOLCALL>[ <think>", [], "nemotron", "nemotron_v3"),
        ("c4ai-command-r7b", "<|START_ACTION|><|START_THINKING|>", [], "command_r", "command_r"),
        (
            "ServiceNow/Apriel-1.6",
            "<tool_calls> <tool_call> [BEGIN FINAL RESPONSE]",
            [],
            "apriel",
            "apriel",
        ),
        ("microsoft/Phi-4-mini", "<|tool_call|>{{ x }}<|/tool_call|>", [], "phi4_mini", None),
        ("LiquidAI/LFM2-1.2B", "<|tool_call_start|>", [], "lfm2", None),
        ("meetkai/functionary-small-v3.2", None, [], "functionary_v3", None),
        ("meetkai/functionary-medium-v3.1", None, [], "functionary_v31", None),
        ("stepfun-ai/step3", "<steptml:invoke <think>", [], "step3", "step3"),
        ("poolside/Laguna", None, [], "poolside_v1", "poolside_v1"),
        ("Salesforce/xLAM-2-8b-fc-r", None, [], "xlam", None),
        ("swiss-ai/Apertus-8B", "<|tools_prefix|>", [], "apertus", None),
    ],
)
def test_detection(model, template, tokens, tool, reasoning):
    assert ToolParserManager.detect(model, template, tokens) == tool
    if reasoning:
        assert ReasoningParserManager.detect(model, template, tokens) == reasoning


@pytest.mark.parametrize(
    ("model", "template", "tokens"),
    [
        ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "<tool_call>\n<function=x>", ["<think>"]),
        ("zai/GLM-4.5-Air", "<arg_key>", ["<think>"]),
        ("some-coder", "<|im_start|>", ["<think>", "</think>"]),
    ],
)
def test_a_template_without_reasoning_markers_gets_no_reasoning_parser(model, template, tokens):
    """The model id and the vocabulary name a thinking family, the template writes none of
    its markers: a non-thinking model (Qwen3-Coder shares Qwen3's name and vocabulary)."""
    assert ReasoningParserManager.detect(model, template, tokens) is None


def test_without_a_template_the_name_and_vocabulary_still_count():
    assert ReasoningParserManager.detect("Qwen/Qwen3-8B", None, []) == "qwen3"
    assert ReasoningParserManager.detect("mystery", None, ["<think>"]) == "qwen3"


@pytest.mark.parametrize(
    ("template", "tool", "reasoning"),
    [
        # Granite 3.3 asks for <think>…</think><response>…</response>
        ("<|tool_call|> <think></think> <response></response>", "granite", "granite"),
        # functionary v3.2 names <|python_tag|> for its code interpreter
        ("<|python_tag|> >>>all\n >>>{{ name }}", "functionary_v3", None),
    ],
)
def test_a_familys_own_markers_win_over_ones_it_shares(template, tool, reasoning):
    assert ToolParserManager.detect("model", template, []) == tool
    assert ReasoningParserManager.detect("model", template, []) == reasoning
