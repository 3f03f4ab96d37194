"""The families: every reasoning and tool-call format by parser name, and the markers that
detect a family from a model's chat template, special tokens and name.

To add a family: describe its syntax here (`families.formats` says what each literal means),
add its detection markers, and check `render_call` against a real model output.
"""

from __future__ import annotations

from . import more_families
from .dialects import GEMMA, JSON, JSON_NAMED, PYTHON, JsonNamed, Xml
from .formats import Channels, ReasoningFormat, ToolCallFormat

HARMONY = Channels()

THINK = ReasoningFormat(
    "qwen3",
    "<think>",
    "</think>",
    # `<think>` writers whose template may open the block (the prompt tail says so); the
    # families with names of their own (think, kimi, step3p5, nemotron_v3, deepseek_v31…)
    # are in more_families.py
    aliases=("qwen", "qwen3_5", "qwq"),
    call_markers=("<tool_call>",),
)

REASONING_FORMATS: dict[str, ReasoningFormat] = {
    f.name: f
    for f in (
        THINK,
        ReasoningFormat(
            "deepseek_r1",
            "<think>",
            "</think>",
            starts_in_reasoning=True,
            # templates that always open the block: Qwen3 Thinking-2507, MiniMax-M2
            aliases=("deepseek-r1", "r1", "deepseek", "qwen3_thinking"),
        ),
        ReasoningFormat(
            "glm45", "<think>", "</think>", aliases=("glm4", "glm4_moe", "glm-4.5", "glm47")
        ),
        ReasoningFormat("mistral", "[THINK]", "[/THINK]", aliases=("magistral",)),
        ReasoningFormat("gemma4", "<|channel>thought", "<channel|>", aliases=("gemma", "gemma-4")),
        ReasoningFormat(
            "harmony",
            HARMONY.channel + HARMONY.reasoning_channel + HARMONY.message,
            HARMONY.end,
            aliases=("gpt_oss", "gpt-oss", "openai", "openai_gptoss"),
            channels=HARMONY,
        ),
        ReasoningFormat("seed_oss", "<seed:think>", "</seed:think>", aliases=("seed-oss", "seed")),
    )
}

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

TOOL_CALL_FORMATS: dict[str, ToolCallFormat] = {
    f.name: f
    for f in (
        ToolCallFormat(
            "hermes",
            JSON_NAMED,
            call_start="<tool_call>\n",
            call_end="\n</tool_call>",
            separator="\n",
            aliases=("qwen", "qwen2_5", "qwen3", "nous", "granite4", "granite_4"),
        ),
        ToolCallFormat(
            "qwen3_coder",
            Xml("<parameter=", ">\n", "\n</parameter>"),
            call_start="<tool_call>\n<function=",
            name_end=">\n",
            args_end="</function>",
            call_end="\n</tool_call>",
            separator="\n",
            # Nemotron 3 and Step 3.5 also write this XML: their own families (more_families.py)
            # read it as well
            aliases=("qwen3_xml", "qwen3_5", "qwen3.5", "qwen3coder", "qwen_xml", "qwen_coder"),
            # <function=…> written without the <tool_call> wrapper
            variants=(
                ToolCallFormat(
                    "qwen3_coder",
                    Xml("<parameter=", ">\n", "\n</parameter>"),
                    call_start="<function=",
                    name_end=">\n",
                    args_end="</function>",
                ),
            ),
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
            "pythonic",
            PYTHON,
            section_start="[",
            section_end="]",
            call_start="",
            name_end="(",
            separator=", ",
            aliases=("llama4_pythonic", "python"),
            variants=(
                ToolCallFormat(
                    "pythonic",
                    PYTHON,
                    section_start="<|python_start|>[",
                    section_end="]<|python_end|>",
                    call_start="",
                    name_end="(",
                    separator=", ",
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
            "glm45",
            Xml("<arg_key>", "</arg_key>", "</arg_value>", value_start="\n<arg_value>"),
            call_start="<tool_call>",
            name_end="\n",
            call_end="</tool_call>",
            separator="\n",
            aliases=("glm4", "glm4_moe", "glm-4.5", "glm47", "glm4.7", "glm45_moe", "glm47_moe"),
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
        ),
        ToolCallFormat(
            "minimax_m2",
            Xml('<parameter name="', '">', "</parameter>"),
            section_start="<minimax:tool_call>\n",
            section_end="</minimax:tool_call>",
            call_start='<invoke name="',
            name_end='">\n',
            call_end="</invoke>\n",
            aliases=("minimax", "minimax-m2"),
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
            "gemma4",
            GEMMA,
            call_start="<|tool_call>call:",
            call_end="<tool_call|>",
            aliases=("gemma", "gemma-4"),
        ),
    )
}

# Upstream vllm-mlx's names that try every format: here they ask for detection from the
# model; with no model to detect from (`vllm-mlx parse`) they mean the Hermes fallback.
AUTO_TOOL_NAMES = ("auto", "generic")
FALLBACK_TOOL_FORMAT = "hermes"

# Detection, most specific first: (marker in the chat template or special tokens, parser) and
# (substring of the lower-cased model name, parser).
REASONING_MARKERS: tuple[tuple[str, str], ...] = (
    ("<seed:think>", "seed_oss"),
    ("[THINK]", "mistral"),
    (HARMONY.channel, "harmony"),
    ("<|channel>", "gemma4"),
)
REASONING_MODEL_NAMES: tuple[tuple[str, str], ...] = (
    ("gpt-oss", "harmony"),
    ("gpt_oss", "harmony"),
    ("seed-oss", "seed_oss"),
    ("magistral", "mistral"),
    ("gemma-4", "gemma4"),
    ("gemma4", "gemma4"),
    ("deepseek-r1", "deepseek_r1"),
    ("deepseek_r1", "deepseek_r1"),
    ("glm-4.5", "glm45"),
    ("glm-4.6", "glm45"),
    ("glm-4.7", "glm45"),
    ("qwq", "qwen3"),
    ("qwen3", "qwen3"),
)
TOOL_CALL_MARKERS: tuple[tuple[str, str], ...] = (
    ("<|tool_calls_section_begin|>", "kimi_k2"),
    ("<minimax:tool_call>", "minimax_m2"),
    (HARMONY.channel, "harmony"),
    ("<arg_key>", "glm45"),
    ("<function=", "qwen3_coder"),
    ("<|tool_call>", "gemma4"),
    ("<|tool_call|>", "granite"),
    ("[TOOL_CALLS]", "mistral"),
    ("<|python_start|>", "pythonic"),
    ("<tool_call>", "hermes"),
    ("<|python_tag|>", "llama3_json"),
)
TOOL_CALL_MODEL_NAMES: tuple[tuple[str, str], ...] = (
    ("kimi", "kimi_k2"),
    ("gpt-oss", "harmony"),
    ("minimax-m2", "minimax_m2"),
    ("qwen3-coder", "qwen3_coder"),
    ("qwen3.5", "qwen3_coder"),
    ("deepseek-v3.1", "deepseek_v31"),
    ("deepseek-v3.2", "deepseek_v31"),
    ("deepseek-v3", "deepseek_v3"),
    ("deepseek-r1", "deepseek_v3"),
    ("glm-4.5", "glm45"),
    ("glm-4.6", "glm45"),
    ("glm-4.7", "glm45"),
    ("gemma-4", "gemma4"),
    ("granite", "granite"),
    ("llama-4", "pythonic"),
    ("llama-3", "llama3_json"),
    ("mistral", "mistral"),
    ("magistral", "mistral"),
    ("devstral", "mistral"),
    ("qwen", "hermes"),
)


# The families added for issue 11 (`families.more_families`): formats appended, their more
# specific detection markers tried first.
REASONING_FORMATS.update((f.name, f) for f in more_families.REASONING)
TOOL_CALL_FORMATS.update((f.name, f) for f in more_families.TOOL_CALLS)
TOOL_CALL_MARKERS = more_families.TOOL_CALL_MARKERS_FIRST + TOOL_CALL_MARKERS
TOOL_CALL_MODEL_NAMES = more_families.TOOL_CALL_MODEL_NAMES_FIRST + TOOL_CALL_MODEL_NAMES
REASONING_MARKERS = more_families.REASONING_MARKERS_FIRST + REASONING_MARKERS
REASONING_MODEL_NAMES = more_families.REASONING_MODEL_NAMES_FIRST + REASONING_MODEL_NAMES
