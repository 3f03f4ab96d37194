"""Tool-call parsers, and the registry of their names, aliases and auto-detection.

Every family except Harmony is parsed by `MarkedToolParser` from its `ToolCallFormat`
(`families.catalog`); Harmony's channels are parsed by `HarmonyParser`, together with its
reasoning. Which of the two a stream needs is decided from the formats (`chat.stream`).
"""

from __future__ import annotations

from collections.abc import Iterable

from vllm_mlx.families.catalog import (
    AUTO_TOOL_NAMES,
    DEEPSEEK_CALLS_BEGIN,
    DEEPSEEK_SEP,
    FALLBACK_TOOL_FORMAT,
    TOOL_CALL_FORMATS,
    TOOL_CALL_MARKERS,
    TOOL_CALL_MODEL_NAMES,
)
from vllm_mlx.families.formats import ToolCallFormat
from vllm_mlx.families.registry import ParserRegistry, UnknownParserError
from vllm_mlx.tool_parsers.base import PlainContent, ToolParser
from vllm_mlx.tool_parsers.continued import ContinuedToolParser
from vllm_mlx.tool_parsers.dropping import DroppingToolParser
from vllm_mlx.tool_parsers.harmony import HarmonyParser
from vllm_mlx.tool_parsers.marked import MarkedToolParser

__all__ = [
    "HarmonyParser",
    "MarkedToolParser",
    "ToolParser",
    "ToolParserManager",
    "UnknownParserError",
    "content_parser",
    "marked_parser",
]


def marked_parser(
    fmt: ToolCallFormat, tools: list[dict] | None = None, dropped: tuple[str, ...] = ()
) -> ToolParser:
    """The parser for a family written between markers; its control markers and
    ``dropped`` (the reasoning format's answer wrappers) are removed from content."""
    parser: ToolParser = MarkedToolParser(fmt, tools)
    if fmt.dropped or dropped:
        parser = DroppingToolParser(parser, tuple(dict.fromkeys((*fmt.dropped, *dropped))))
    return ContinuedToolParser(parser, fmt.prompt_opens) if fmt.prompt_opens else parser


def content_parser(dropped: tuple[str, ...]) -> ToolParser | None:
    """Without a tool-call format: a parser that only removes ``dropped``, if any."""
    return DroppingToolParser(PlainContent(), dropped) if dropped else None


class _ToolParsers(ParserRegistry[ToolCallFormat]):
    def detect(
        self, model_name: str, chat_template: str | None, special_tokens: Iterable[str]
    ) -> str | None:
        """DeepSeek's call markers (V3 and V3.1 differ in the template), then markers, then
        the model name."""
        special_tokens = set(special_tokens)
        template = chat_template or ""
        if DEEPSEEK_CALLS_BEGIN in special_tokens or DEEPSEEK_CALLS_BEGIN in template:
            return "deepseek_v3" if "function" + DEEPSEEK_SEP in template else "deepseek_v31"
        return self.match(model_name, chat_template, special_tokens)


# The registry of tool-call parsers.
ToolParserManager = _ToolParsers(
    "tool-call",
    TOOL_CALL_FORMATS,
    TOOL_CALL_MARKERS,
    TOOL_CALL_MODEL_NAMES,
    auto=(AUTO_TOOL_NAMES, FALLBACK_TOOL_FORMAT),
)
