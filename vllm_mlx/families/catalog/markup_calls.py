"""The tool-call families whose arguments are markup or Python: Qwen3-Coder and its XML
relatives (Seed-OSS, Step 3/3.5, GLM-4.5, Poolside, MiniMax M2/M3, DeepSeek V3.2 DSML),
pythonic lists (Llama 4, LFM2) and Gemma 4. Marker spellings and their sources:
docs/parsers.md."""

from __future__ import annotations

from ..dialects import (
    FORCED_PYTHON,
    GEMMA,
    JSON_NAMED,
    PYTHON,
    QWEN_XML,
    Dsml,
    NestedXml,
    SpacedNameXml,
    Xml,
)
from ..formats import ToolCallFormat

DSML = "｜DSML｜"
_DSML = Dsml("<" + DSML + 'parameter name="', '"', "</｜DSML｜parameter>")
MINIMAX_NS = "]<]minimax[>["

MARKUP_CALLS: tuple[ToolCallFormat, ...] = (
    ToolCallFormat(
        "qwen3_coder",
        QWEN_XML,
        call_start="<tool_call>\n<function=",
        name_end=">\n",
        args_end="</function>",
        call_end="\n</tool_call>",
        separator="\n",
        # Nemotron 3 and Step 3.5 also write this XML: their own families (seed_oss, step3p5,
        # nemotron) read it as well
        aliases=("qwen3_xml", "qwen3_5", "qwen3.5", "qwen3coder", "qwen_xml", "qwen_coder"),
        # <function=…> written without the <tool_call> wrapper
        variants=(
            ToolCallFormat(
                "qwen3_coder",
                QWEN_XML,
                call_start="<function=",
                name_end=">\n",
                args_end="</function>",
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
        "glm45",
        Xml("<arg_key>", "</arg_key>", "</arg_value>", value_start="\n<arg_value>"),
        call_start="<tool_call>",
        name_end="\n",
        call_end="</tool_call>",
        separator="\n",
        aliases=("glm4", "glm4_moe", "glm-4.5", "glm47", "glm4.7", "glm45_moe", "glm47_moe"),
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
        "gemma4",
        GEMMA,
        call_start="<|tool_call>call:",
        call_end="<tool_call|>",
        aliases=("gemma", "gemma-4"),
    ),
    ToolCallFormat(
        "seed_oss",
        QWEN_XML,
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
        QWEN_XML,
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
        variants=(
            # llama.cpp's LFM2 template writes history calls as a JSON list (with ids)
            ToolCallFormat(
                "lfm2",
                JSON_NAMED,
                section_start="<|tool_call_start|>[",
                section_end="]<|tool_call_end|>",
                call_start="",
                separator=", ",
            ),
        ),
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
