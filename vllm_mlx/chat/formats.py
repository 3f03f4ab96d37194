"""How each model family writes reasoning and tool calls: one description, read by everyone.

The tool parsers, the constraint builder for ``tool_choice: required`` / named functions and
the thinking-budget processor all read these descriptions, so the grammar that forces a call
and the parser that reads it cannot disagree about the syntax.

Reasoning (``REASONING_FORMATS``, keyed by reasoning-parser name): ``start`` and ``end`` are the
exact texts that open and close the reasoning block; ``starts_in_reasoning`` says the model's
template always opens the block itself (deepseek_r1), so generation begins inside it.

Tool calls (``TOOL_CALL_FORMATS``, keyed by tool-parser name). One call is written as::

    section_start? call_start NAME name_end ARGUMENTS args_end call_end (separator call...)*
    section_end?

* ``section_start`` / ``section_end``: literal texts around a block of calls ("" if none).
* ``call_start``: literal text before each call's name (or before the JSON object when
  ``dialect`` is ``json_named``, where the name is a field inside the object).
* ``name_end``: literal text after the name ("" when the name simply ends where the arguments
  begin, e.g. gemma4 ``call:name{``). ``name_prefix`` is text inside the name position that
  is not part of the function name (kimi_k2 writes ``functions.NAME:0``).
* ``dialect`` (how ARGUMENTS are written):
    - ``json``: a JSON object.
    - ``json_named``: one JSON object ``{"name": NAME, "<arguments_key>": {...}}``.
    - ``xml``: a sequence of ``xml.key_start KEY xml.key_end xml.value_start VALUE
      xml.value_end``; VALUE is raw text (no escaping): a parameter declared ``string`` in the
      tool's JSON schema is kept verbatim, other declared types are JSON literals.
    - ``python``: Python keyword arguments ``a=1, b="x"`` inside ``NAME(...)``.
    - ``gemma``: gemma4 literals ``{key:<|"|>text<|"|>,n:1,flag:true,obj:{...},list:[...]}``.
* ``args_end``, ``call_end``: literal texts after the arguments; ``separator`` between calls.

Whitespace: a newline written in any literal above means "optional whitespace" when parsing,
and exactly that newline when generating. ``render_call`` writes one canonical call, which is
the text a constraint should force and what the parser reads back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

ArgDialect = Literal["json", "json_named", "xml", "python", "gemma"]


class UnknownParserError(ValueError):
    """A parser name that is neither a canonical name nor an alias."""

    def __init__(self, kind: str, name: str, valid: Iterable[str]) -> None:
        self.valid = sorted(valid)
        super().__init__(f"unknown {kind} parser {name!r}; valid names: {', '.join(self.valid)}")


@dataclass(frozen=True)
class ReasoningFormat:
    """The delimiters of a family's reasoning block."""

    name: str
    start: str
    end: str
    starts_in_reasoning: bool = False
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class XmlParameters:
    """How an XML-dialect family writes one parameter."""

    key_start: str
    key_end: str
    value_end: str
    value_start: str = ""


@dataclass(frozen=True)
class ToolCallFormat:
    """The exact syntax of a family's tool calls (see the module docstring)."""

    name: str
    dialect: ArgDialect
    call_start: str
    call_end: str = ""
    name_end: str = ""
    args_end: str = ""
    section_start: str = ""
    section_end: str = ""
    separator: str = ""
    name_prefix: str = ""
    arguments_key: str = "arguments"
    xml: XmlParameters | None = None
    stop_markers: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    # Other openings of the same family, tried when this one does not match (mistral).
    variants: tuple[ToolCallFormat, ...] = field(default=(), compare=False)

    def render_call(self, name: str, arguments: dict, *, index: int = 0) -> str:
        """One call written exactly as this family writes it (without section markers)."""
        return (
            self.call_start
            + self._render_name_and_args(name, arguments, index)
            + self.args_end
            + self.call_end
        )

    def render_calls(self, calls: list[tuple[str, dict]]) -> str:
        """A whole block of calls, section markers and separators included."""
        body = self.separator.join(
            self.render_call(name, args, index=i) for i, (name, args) in enumerate(calls)
        )
        return self.section_start + body + self.section_end

    def _render_name_and_args(self, name: str, arguments: dict, index: int) -> str:
        if self.dialect == "json_named":
            obj = {"name": name, self.arguments_key: arguments}
            return json.dumps(obj, ensure_ascii=False)
        head = f"{self.name_prefix}{name}{':' + str(index) if self.name_prefix else ''}"
        head += self.name_end
        if self.dialect == "json":
            return head + json.dumps(arguments, ensure_ascii=False)
        if self.dialect == "python":
            kwargs = ", ".join(f"{k}={_python_literal(v)}" for k, v in arguments.items())
            return head + kwargs + ")"
        if self.dialect == "gemma":
            return head + gemma_literal(arguments)
        assert self.xml is not None
        x = self.xml
        params = "".join(
            f"{x.key_start}{k}{x.key_end}{x.value_start}{xml_value_text(v)}{x.value_end}\n"
            for k, v in arguments.items()
        )
        return head + params


def xml_value_text(value: object) -> str:
    """How an XML dialect writes a value: strings verbatim, everything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _python_literal(value: object) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, dict):
        items = ", ".join(f"{_python_literal(k)}: {_python_literal(v)}" for k, v in value.items())
        return "{" + items + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_python_literal(v) for v in value) + "]"
    return repr(value)


GEMMA_QUOTE = '<|"|>'


def gemma_literal(value: object) -> str:
    """A value in gemma4's tool-call literal syntax (strings quoted with ``<|"|>``)."""
    if isinstance(value, str):
        return GEMMA_QUOTE + value + GEMMA_QUOTE
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{gemma_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(gemma_literal(v) for v in value) + "]"
    return json.dumps(value)


THINK = ReasoningFormat("qwen3", "<think>", "</think>", aliases=("qwen", "qwen3_5", "qwq"))

REASONING_FORMATS: dict[str, ReasoningFormat] = {
    f.name: f
    for f in (
        THINK,
        ReasoningFormat(
            "deepseek_r1",
            "<think>",
            "</think>",
            starts_in_reasoning=True,
            aliases=("deepseek-r1", "r1", "deepseek"),
        ),
        ReasoningFormat(
            "glm45", "<think>", "</think>", aliases=("glm4", "glm4_moe", "glm-4.5", "glm47")
        ),
        ReasoningFormat("mistral", "[THINK]", "[/THINK]", aliases=("magistral",)),
        ReasoningFormat("gemma4", "<|channel>thought", "<channel|>", aliases=("gemma", "gemma-4")),
        ReasoningFormat(
            "harmony",
            "<|channel|>analysis<|message|>",
            "<|end|>",
            aliases=("gpt_oss", "gpt-oss", "openai"),
        ),
        ReasoningFormat("seed_oss", "<seed:think>", "</seed:think>", aliases=("seed-oss", "seed")),
    )
}

DEEPSEEK_CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
DEEPSEEK_CALLS_END = "<｜tool▁calls▁end｜>"
DEEPSEEK_CALL_BEGIN = "<｜tool▁call▁begin｜>"
DEEPSEEK_CALL_END = "<｜tool▁call▁end｜>"
DEEPSEEK_SEP = "<｜tool▁sep｜>"

_MISTRAL_NAMED = ToolCallFormat("mistral", "json", call_start="[TOOL_CALLS]", name_end="[ARGS]")

TOOL_CALL_FORMATS: dict[str, ToolCallFormat] = {
    f.name: f
    for f in (
        ToolCallFormat(
            "hermes",
            "json_named",
            call_start="<tool_call>\n",
            call_end="\n</tool_call>",
            separator="\n",
            aliases=("qwen", "qwen2_5", "qwen3", "nous"),
        ),
        ToolCallFormat(
            "qwen3_coder",
            "xml",
            call_start="<tool_call>\n<function=",
            name_end=">\n",
            xml=XmlParameters("<parameter=", ">\n", "\n</parameter>"),
            args_end="</function>",
            call_end="\n</tool_call>",
            separator="\n",
            aliases=("qwen3_xml", "qwen3_5", "qwen3.5", "qwen3coder"),
        ),
        ToolCallFormat(
            "llama3_json",
            "json_named",
            section_start="<|python_tag|>",
            call_start="",
            separator="; ",
            arguments_key="parameters",
            stop_markers=("<|eom_id|>",),
            aliases=("llama3", "llama3_1", "llama3.1", "llama3.2", "llama"),
            variants=(
                ToolCallFormat(
                    "llama3_json",
                    "json_named",
                    call_start="",
                    separator="; ",
                    arguments_key="parameters",
                ),
            ),
        ),
        ToolCallFormat(
            "pythonic",
            "python",
            section_start="[",
            section_end="]",
            call_start="",
            name_end="(",
            separator=", ",
            aliases=("llama4_pythonic", "llama4", "python"),
            variants=(
                ToolCallFormat(
                    "pythonic",
                    "python",
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
            "json_named",
            section_start="[TOOL_CALLS][",
            section_end="]",
            call_start="",
            separator=", ",
            aliases=("magistral", "devstral", "mistral_small"),
            variants=(
                _MISTRAL_NAMED,
                ToolCallFormat(
                    "mistral",
                    "json_named",
                    section_start="[TOOL_CALLS] [",
                    section_end="]",
                    call_start="",
                    separator=", ",
                ),
            ),
        ),
        ToolCallFormat(
            "deepseek_v3",
            "json",
            section_start=DEEPSEEK_CALLS_BEGIN,
            section_end=DEEPSEEK_CALLS_END,
            call_start=DEEPSEEK_CALL_BEGIN + "function" + DEEPSEEK_SEP,
            name_end="\n```json\n",
            args_end="\n```",
            call_end=DEEPSEEK_CALL_END,
            stop_markers=("<｜end▁of▁sentence｜>",),
            aliases=("deepseek-v3", "deepseek_r1_0528", "deepseek"),
        ),
        ToolCallFormat(
            "deepseek_v31",
            "json",
            section_start=DEEPSEEK_CALLS_BEGIN,
            section_end=DEEPSEEK_CALLS_END,
            call_start=DEEPSEEK_CALL_BEGIN,
            name_end=DEEPSEEK_SEP,
            call_end=DEEPSEEK_CALL_END,
            stop_markers=("<｜end▁of▁sentence｜>",),
            aliases=("deepseek_v3.1", "deepseek-v3.1", "deepseek_v32"),
        ),
        ToolCallFormat(
            "glm45",
            "xml",
            call_start="<tool_call>",
            name_end="\n",
            xml=XmlParameters(
                "<arg_key>", "</arg_key>", "</arg_value>", value_start="\n<arg_value>"
            ),
            call_end="</tool_call>",
            separator="\n",
            aliases=("glm4", "glm4_moe", "glm-4.5", "glm47", "glm4.7"),
        ),
        ToolCallFormat(
            "kimi_k2",
            "json",
            section_start="<|tool_calls_section_begin|>",
            section_end="<|tool_calls_section_end|>",
            call_start="<|tool_call_begin|>",
            name_prefix="functions.",
            name_end="<|tool_call_argument_begin|>",
            call_end="<|tool_call_end|>",
            aliases=("kimi", "kimi-k2"),
        ),
        ToolCallFormat(
            "minimax_m2",
            "xml",
            section_start="<minimax:tool_call>\n",
            section_end="</minimax:tool_call>",
            call_start='<invoke name="',
            name_end='">\n',
            xml=XmlParameters('<parameter name="', '">', "</parameter>"),
            call_end="</invoke>\n",
            aliases=("minimax", "minimax-m2"),
        ),
        ToolCallFormat(
            "harmony",
            "json",
            call_start="<|start|>assistant<|channel|>commentary to=functions.",
            name_end=" <|constrain|>json<|message|>",
            call_end="<|call|>",
            stop_markers=("<|call|>", "<|return|>"),
            aliases=("gpt_oss", "gpt-oss", "openai"),
        ),
        ToolCallFormat(
            "granite",
            "json_named",
            section_start="<|tool_call|>[",
            section_end="]",
            call_start="",
            separator=", ",
            aliases=("granite3", "granite-3"),
        ),
        ToolCallFormat(
            "gemma4",
            "gemma",
            call_start="<|tool_call>call:",
            call_end="<tool_call|>",
            aliases=("gemma", "gemma-4"),
        ),
    )
}


def reasoning_format(name: str) -> ReasoningFormat:
    """The reasoning delimiters for a canonical reasoning-parser name."""
    return REASONING_FORMATS[name]


def tool_call_format(name: str) -> ToolCallFormat:
    """The tool-call syntax for a canonical tool-parser name."""
    return TOOL_CALL_FORMATS[name]
