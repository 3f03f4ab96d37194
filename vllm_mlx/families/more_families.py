"""The families added for issue 11 (Seed-OSS, DeepSeek V3.2 DSML, Nemotron, Command-R, Apriel,
Phi-4-mini, Functionary, LFM2, Step-3/3.5, Poolside, xLAM, Apertus and their reasoning
formats), with their detection markers. `families.catalog` joins them to its tables; their
detection markers are tried before the older families' (they are more specific).

Marker spellings and sources: docs/parsers.md.
"""

from __future__ import annotations

from typing import Any

from .dialects import (
    FORCED_PYTHON,
    JSON,
    JSON_NAMED,
    RECIPIENT,
    Dsml,
    JsonKeyed,
    NestedXml,
    SpacedNameXml,
    Xml,
)
from .formats import ReasoningFormat, ToolCallFormat

# Markers and sources: docs/parsers.md ("Tool-call parsers"), /work notes on issue 11.

REASONING: tuple[ReasoningFormat, ...] = (
    ReasoningFormat("think", "<think>", "</think>", aliases=("think_tags",)),
    ReasoningFormat("poolside_v1", "<think>", "</think>", aliases=("poolside", "laguna")),
    ReasoningFormat("step3p5", "<think>", "</think>", aliases=("step3.5", "step3_5")),
    ReasoningFormat("step3", "<think>", "</think>", aliases=("stepfun",)),
    ReasoningFormat(
        "nemotron_v3", "<think>", "</think>", aliases=("nano_v3", "nemotron3", "nemotron")
    ),
    ReasoningFormat("kimi_k25", "<think>", "</think>", aliases=("kimi_k2", "kimi_thinking")),
    ReasoningFormat("kimi", "◁think▷", "◁/think▷", aliases=("kimi_vl",)),
    ReasoningFormat(  # the template opened the block (vLLM's "append think")
        "minimax_m2_append_think", "<think>", "</think>", starts_in_reasoning=True
    ),
    ReasoningFormat(
        "minimax_m2",
        "<think>",
        "</think>",
        aliases=("minimax", "minimax_m3"),
    ),
    ReasoningFormat("deepseek_v31", "<think>", "</think>", aliases=("deepseek_v3", "deepseek_v32")),
    ReasoningFormat(
        "command_r",
        "<|START_THINKING|>",
        "<|END_THINKING|>",
        aliases=("cohere", "cohere_cmd", "cohere_command3", "cohere_command4", "command_a"),
    ),
    ReasoningFormat(
        "apriel",
        "Here are my reasoning steps:\n",
        "[BEGIN FINAL RESPONSE]",
        starts_in_reasoning=True,  # Apriel 1.6 always reasons; its template opens the block
        aliases=("apriel_thinker", "apriel-1.6"),
    ),
    ReasoningFormat(
        "granite",
        "Here is my thought process:",
        "Here is my response:",
        aliases=("granite3.2", "granite-3.2"),
    ),
)

DSML = "｜DSML｜"
_DSML = Dsml("<" + DSML + 'parameter name="', '"', "</｜DSML｜parameter>")
MINIMAX_NS = "]<]minimax[>["
_COHERE = JsonKeyed()
_COHERE_CONTROL = (
    "<|START_RESPONSE|>",
    "<|END_RESPONSE|>",
    "<|START_TEXT|>",
    "<|END_TEXT|>",
    "<|CHATBOT_TOKEN|>",
    "<|END_OF_TURN_TOKEN|>",
)
_NEMOTRON_JSON: dict[str, Any] = dict(section_end="\n]</TOOLCALL>", call_start="", separator=",\n")
_JSON_LIST: dict[str, Any] = dict(section_end="\n]", call_start="", separator=",\n")

TOOL_CALLS: tuple[ToolCallFormat, ...] = (
    ToolCallFormat(
        "seed_oss",
        Xml("<parameter=", ">\n", "\n</parameter>"),
        call_start="<seed:tool_call>\n<function=",
        name_end=">\n",
        args_end="</function>",
        call_end="\n</seed:tool_call>",
        separator="\n",
        aliases=("seed-oss", "seed"),
    ),
    ToolCallFormat(
        "step3",
        Xml('<steptml:parameter name="', '">', "</steptml:parameter>"),
        section_start="<｜tool_calls_begin｜>\n",
        section_end="\n<｜tool_calls_end｜>",
        call_start='<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="',
        name_end='">\n',
        args_end="</steptml:invoke>",
        call_end="<｜tool_call_end｜>",
        separator="\n",
        aliases=("stepfun", "step-3"),
    ),
    ToolCallFormat(
        "step3p5",
        Xml("<parameter=", ">\n", "\n</parameter>"),
        call_start="<tool_call>\n<function=",
        name_end=">\n",
        args_end="</function>",
        call_end="\n</tool_call>",
        separator="\n",
        aliases=("step", "step3.5", "step3_5", "step3.7"),
    ),
    ToolCallFormat(
        "poolside_v1",
        SpacedNameXml("<arg_key>", "</arg_key>", "</arg_value>", value_start="\n<arg_value>"),
        call_start="<tool_call>",
        name_end="\n",
        call_end="</tool_call>",
        separator="\n",
        aliases=("poolside", "laguna"),
    ),
    ToolCallFormat(
        "nemotron",
        JSON_NAMED,
        section_start="<TOOLCALL>[\n",
        **_NEMOTRON_JSON,
        aliases=("nemotron_json", "nemotron3", "nemotron_nano", "nemotron-nano-v2"),
        dropped=("<SPECIAL_12>",),
        variants=(
            ToolCallFormat(
                "nemotron", JSON_NAMED, call_start="<TOOLCALL>\n", call_end="\n</TOOLCALL>"
            ),
            # Nemotron 3 Nano writes Qwen3-Coder XML calls
            ToolCallFormat(
                "nemotron",
                Xml("<parameter=", ">\n", "\n</parameter>"),
                call_start="<tool_call>\n<function=",
                name_end=">\n",
                args_end="</function>",
                call_end="\n</tool_call>",
                separator="\n",
            ),
        ),
    ),
    ToolCallFormat(
        "apriel",
        JSON_NAMED,
        section_start="<tool_calls>[\n",
        section_end="\n]</tool_calls>",
        call_start="",
        separator=",\n",
        aliases=("apriel_15", "apriel-1.5", "apriel-1.6"),
        dropped=("[END FINAL RESPONSE]", "<|end|>"),
    ),
    ToolCallFormat(
        "phi4_mini",
        JSON_NAMED,
        section_start="functools[\n",
        **_JSON_LIST,
        aliases=("phi4_mini_json", "phi4", "phi-4-mini", "firefunction", "firefunction_v2"),
        dropped=("functools[]",),  # an empty call list is no call
        variants=(
            # llama.cpp's own Phi-4-mini template teaches this form
            ToolCallFormat(
                "phi4_mini",
                JSON_NAMED,
                call_start="<|tool_call|>\n",
                call_end="\n<|/tool_call|>",
                separator="\n",
            ),
        ),
    ),
    ToolCallFormat(
        "xlam",
        JSON_NAMED,
        section_start="[\n",
        **_JSON_LIST,
        aliases=("salesforce_xlam",),
        variants=(
            ToolCallFormat(
                "xlam",
                JSON_NAMED,
                section_start="```json\n[\n",
                section_end="\n]\n```",
                call_start="",
                separator=",\n",
            ),
            ToolCallFormat("xlam", JSON_NAMED, section_start="[TOOL_CALLS][\n", **_JSON_LIST),
            ToolCallFormat(
                "xlam",
                JSON_NAMED,
                section_start="<tool_call>[\n",
                section_end="\n]\n</tool_call>",
                call_start="",
                separator=",\n",
            ),
        ),
    ),
    ToolCallFormat(
        "lfm2",
        FORCED_PYTHON,
        section_start="<|tool_call_start|>\n[",
        section_end="]\n<|tool_call_end|>",
        call_start="",
        name_end="(",
        separator=", ",
        aliases=("lfm2.5", "lfm2_5", "liquid"),
        # an empty call list is no call
        dropped=(
            "<|tool_call_start|>[]<|tool_call_end|>",
            "<|tool_call_start|>[ ]<|tool_call_end|>",
        ),
    ),
    ToolCallFormat(
        "apertus",
        JSON,
        section_start="<|tools_prefix|>[\n",
        section_end="\n]<|tools_suffix|>",
        call_start='{"',
        name_end='":\n',
        args_end="\n}",
        separator=",\n",
    ),
    ToolCallFormat(
        "deepseek_v32",
        _DSML,
        section_start="<" + DSML + "function_calls>\n",
        section_end="</" + DSML + "function_calls>",
        call_start="<" + DSML + 'invoke name="',
        name_end='">\n',
        call_end="</" + DSML + "invoke>\n",
        aliases=("deepseek32", "deepseek_v3.2", "deepseek-v3.2", "dsml", "deepseek_v4"),
        # a stray end marker, or the end of sentence when stop strings miss it
        dropped=(
            "</" + DSML + "function_calls>",
            "</" + DSML + "tool_calls>",
            "<｜end▁of▁sentence｜>",
        ),
        variants=(
            ToolCallFormat(  # DeepSeek V4: the same calls in a `tool_calls` block
                "deepseek_v32",
                _DSML,
                section_start="<" + DSML + "tool_calls>\n",
                section_end="</" + DSML + "tool_calls>",
                call_start="<" + DSML + 'invoke name="',
                name_end='">\n',
                call_end="</" + DSML + "invoke>\n",
            ),
        ),
    ),
    ToolCallFormat(
        "command_r",
        _COHERE,
        section_start="<|START_ACTION|>\n[\n",
        section_end="\n]\n<|END_ACTION|>",
        call_start="",
        separator=",\n",
        aliases=(
            "cohere",
            "command_r7b",
            "command_r_plus",
            "command_a",
            "cohere_command3",
            "cohere_command4",
        ),
        dropped=_COHERE_CONTROL,
        variants=(
            ToolCallFormat(
                "command_r",
                _COHERE,
                call_start="<|START_ACTION|>\n",
                call_end="\n<|END_ACTION|>",
            ),
            ToolCallFormat(  # Command R+
                "command_r",
                _COHERE,
                section_start="Action:\n```json\n[\n",
                section_end="\n]\n```",
                call_start="",
                separator=",\n",
            ),
        ),
    ),
    ToolCallFormat(
        "functionary_v3",
        RECIPIENT,
        call_start=">>>",
        name_end="\n",
        aliases=("functionary", "meetkai", "functionary_v3.2", "functionary_v32"),
        dropped=(">>>all\n",),
        prompt_opens=">>>",
    ),
    ToolCallFormat(
        "functionary_v31",
        JSON,
        call_start="<function=",
        name_end=">",
        call_end="</function>",
        aliases=("functionary_v3.1", "functionary_llama3"),
    ),
    ToolCallFormat(
        "minimax_m3",
        NestedXml(MINIMAX_NS, MINIMAX_NS + "</invoke>"),
        section_start=MINIMAX_NS + "<tool_call>\n",
        section_end=MINIMAX_NS + "</tool_call>",
        call_start=MINIMAX_NS + '<invoke name="',
        name_end='">',
        args_end=MINIMAX_NS + "</invoke>",
        call_end="\n",
        aliases=("minimax-m3",),
    ),
)

# Detection of the families above. Their markers are more specific than the older families'
# (a Seed-OSS template also holds `<function=`, an Apriel one `<tool_call>`, llama.cpp's
# Phi-4-mini one `<|tool_call|>`), so they are tried first.
TOOL_CALL_MARKERS_FIRST = (
    ("<seed:tool_call>", "seed_oss"),
    (DSML, "deepseek_v32"),
    ("<steptml:invoke", "step3"),
    ("<TOOLCALL>", "nemotron"),
    ("<|START_ACTION|>", "command_r"),
    ("<tool_calls>", "apriel"),
    ("<|/tool_call|>", "phi4_mini"),
    ("functools[", "phi4_mini"),
    ("<|tool_call_start|>", "lfm2"),
    ("<|tools_prefix|>", "apertus"),
    (MINIMAX_NS, "minimax_m3"),
)
TOOL_CALL_MODEL_NAMES_FIRST = (
    ("seed-oss", "seed_oss"),
    ("nemotron", "nemotron"),
    ("command-r", "command_r"),
    ("c4ai-command", "command_r"),
    ("command-a", "command_r"),
    ("apriel", "apriel"),
    ("phi-4-mini", "phi4_mini"),
    ("functionary-small-v3.1", "functionary_v31"),
    ("functionary-medium-v3.1", "functionary_v31"),
    ("functionary", "functionary_v3"),
    ("lfm2", "lfm2"),
    ("step-3.5", "step3p5"),
    ("step3.5", "step3p5"),
    ("step-3", "step3"),
    ("step3", "step3"),
    ("laguna", "poolside_v1"),
    ("poolside", "poolside_v1"),
    ("xlam", "xlam"),
    ("apertus", "apertus"),
    ("minimax-m3", "minimax_m3"),
)
REASONING_MARKERS_FIRST = (
    ("<|START_THINKING|>", "command_r"),
    ("[BEGIN FINAL RESPONSE]", "apriel"),
    ("◁think▷", "kimi"),
    ("Here is my thought process:", "granite"),
)
REASONING_MODEL_NAMES_FIRST = (
    ("laguna", "poolside_v1"),
    ("poolside", "poolside_v1"),
    ("step-3.5", "step3p5"),
    ("step3.5", "step3p5"),
    ("step-3", "step3"),
    ("step3", "step3"),
    ("nemotron", "nemotron_v3"),
    ("kimi-k2.5", "kimi_k25"),
    ("kimi-k2-thinking", "kimi_k25"),
    ("minimax-m2", "minimax_m2"),
    ("apriel", "apriel"),
    ("command-r", "command_r"),
    ("command-a", "command_r"),
    ("c4ai-command", "command_r"),
    ("granite-3.2", "granite"),
)
