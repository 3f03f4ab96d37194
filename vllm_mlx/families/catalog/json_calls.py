"""The tool-call families whose arguments are a JSON object: Hermes, Llama 3, Mistral,
DeepSeek V3/V3.1, Kimi K2, Harmony, Granite, Nemotron, Apriel, Phi-4-mini, xLAM, Apertus,
Command-R and Functionary. Marker spellings and their sources: docs/parsers.md."""

from __future__ import annotations

from typing import Any

from ..dialects import JSON, JSON_NAMED, QWEN_XML, RECIPIENT, JsonKeyed, JsonNamed
from ..formats import HARMONY, ToolCallFormat

DEEPSEEK_CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
DEEPSEEK_CALLS_END = "<｜tool▁calls▁end｜>"
DEEPSEEK_CALL_BEGIN = "<｜tool▁call▁begin｜>"
DEEPSEEK_CALL_END = "<｜tool▁call▁end｜>"
DEEPSEEK_SEP = "<｜tool▁sep｜>"
DEEPSEEK_EOS = "<｜end▁of▁sentence｜>"

_MISTRAL_NAMED = ToolCallFormat(
    "mistral", JSON, call_start="[TOOL_CALLS]", name_end="[ARGS]", call_id_marker="[CALL_ID]"
)
# v11 tokenizers without [ARGS]: the name directly followed by the JSON object
_MISTRAL_BARE_NAME = ToolCallFormat("mistral", JSON, call_start="[TOOL_CALLS]")
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

JSON_CALLS: tuple[ToolCallFormat, ...] = (
    ToolCallFormat(
        "hermes",
        JSON_NAMED,
        call_start="<tool_call>\n",
        call_end="\n</tool_call>",
        separator="\n",
        aliases=("qwen", "qwen2_5", "qwen3", "nous", "granite4", "granite_4"),
    ),
    ToolCallFormat(
        "llama3_json",
        JsonNamed("parameters"),
        section_start="<|python_tag|>",
        call_start="",
        separator="; ",
        aliases=(
            "llama3",
            "llama3_1",
            "llama3.1",
            "llama3.2",
            "llama",
            "llama4",
            "llama4_json",
        ),
        variants=(
            ToolCallFormat(
                "llama3_json",
                JsonNamed("parameters"),
                call_start="",
                separator="; ",
            ),
        ),
    ),
    ToolCallFormat(
        "mistral",
        JSON_NAMED,
        section_start="[TOOL_CALLS][",
        section_end="]",
        call_start="",
        separator=", ",
        aliases=("magistral", "devstral", "mistral_small"),
        id_style="alnum9",
        variants=(
            _MISTRAL_NAMED,
            _MISTRAL_BARE_NAME,
            ToolCallFormat(
                "mistral",
                JSON_NAMED,
                section_start="[TOOL_CALLS] [",
                section_end="]",
                call_start="",
                separator=", ",
            ),
        ),
    ),
    ToolCallFormat(
        "deepseek_v3",
        JSON,
        section_start=DEEPSEEK_CALLS_BEGIN,
        section_end=DEEPSEEK_CALLS_END,
        call_start=DEEPSEEK_CALL_BEGIN + "function" + DEEPSEEK_SEP,
        name_end="\n```json\n",
        args_end="\n```",
        call_end=DEEPSEEK_CALL_END,
        aliases=("deepseek-v3", "deepseek_r1_0528", "deepseek", "deepseek_r1"),
        dropped=(DEEPSEEK_EOS,),
    ),
    ToolCallFormat(
        "deepseek_v31",
        JSON,
        section_start=DEEPSEEK_CALLS_BEGIN,
        section_end=DEEPSEEK_CALLS_END,
        call_start=DEEPSEEK_CALL_BEGIN,
        name_end=DEEPSEEK_SEP,
        call_end=DEEPSEEK_CALL_END,
        aliases=("deepseek_v3.1", "deepseek-v3.1", "deepseek31"),
        dropped=(DEEPSEEK_EOS,),
    ),
    ToolCallFormat(
        "kimi_k2",
        JSON,
        section_start="<|tool_calls_section_begin|>",
        section_end="<|tool_calls_section_end|>",
        call_start="<|tool_call_begin|>",
        name_prefix="functions.",
        name_end="<|tool_call_argument_begin|>",
        call_end="<|tool_call_end|>",
        aliases=("kimi", "kimi-k2", "kimik2", "moonshot"),
        id_style="kimi",
        whole_calls=True,
        variants=(
            # calls written without the section markers (seen in real Kimi K2 outputs)
            ToolCallFormat(
                "kimi_k2",
                JSON,
                call_start="<|tool_call_begin|>",
                name_prefix="functions.",
                name_end="<|tool_call_argument_begin|>",
                call_end="<|tool_call_end|>",
                whole_calls=True,
            ),
        ),
    ),
    ToolCallFormat(
        "harmony",
        JSON,
        call_start=f"{HARMONY.start}assistant{HARMONY.channel}{HARMONY.tool_channel} "
        f"{HARMONY.recipient}{HARMONY.functions}",
        name_end=f" {HARMONY.constrain}json{HARMONY.message}",
        call_end=HARMONY.call,
        aliases=("gpt_oss", "gpt-oss", "openai"),
        channels=HARMONY,
    ),
    ToolCallFormat(
        "granite",
        JSON_NAMED,
        section_start="<|tool_call|>[",
        section_end="]",
        call_start="",
        separator=", ",
        aliases=("granite3", "granite-3"),
        variants=(
            # Granite 3.1 writes the list after a plain <tool_call>; a lone object
            # without the list is accepted too
            ToolCallFormat(
                "granite",
                JSON_NAMED,
                section_start="<tool_call>[",
                section_end="]",
                call_start="",
                separator=", ",
            ),
            ToolCallFormat("granite", JSON_NAMED, section_start="<|tool_call|>", call_start=""),
        ),
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
                QWEN_XML,
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
)
