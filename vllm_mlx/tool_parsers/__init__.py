"""Tool-call parsers: names, aliases, auto-detection and construction.

Every family except Harmony is parsed by `MarkedToolParser` from its description in
`vllm_mlx.chat.formats`; Harmony's channels are parsed by `HarmonyParser`.
"""

from __future__ import annotations

from collections.abc import Iterable

from vllm_mlx.chat.formats import (
    DEEPSEEK_CALLS_BEGIN,
    DEEPSEEK_SEP,
    TOOL_CALL_FORMATS,
    UnknownParserError,
)
from vllm_mlx.chat.registry import ParserRegistry
from vllm_mlx.tool_parsers.base import ToolParser
from vllm_mlx.tool_parsers.marked import MarkedToolParser

__all__ = ["MarkedToolParser", "ToolParser", "ToolParserManager", "UnknownParserError"]


# (marker in the chat template or special tokens, parser), most specific first
_MARKERS = (
    ("<|tool_calls_section_begin|>", "kimi_k2"),
    ("<minimax:tool_call>", "minimax_m2"),
    ("<|channel|>", "harmony"),
    ("<arg_key>", "glm45"),
    ("<function=", "qwen3_coder"),
    ("<|tool_call>", "gemma4"),
    ("<|tool_call|>", "granite"),
    ("[TOOL_CALLS]", "mistral"),
    ("<|python_start|>", "pythonic"),
    ("<tool_call>", "hermes"),
    ("<|python_tag|>", "llama3_json"),
)
# (substring of the lower-cased model name, parser), most specific first
_NAMES = (
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


class _ToolParsers(ParserRegistry):
    def create(self, name: str, tools: list[dict] | None = None) -> ToolParser:
        """A fresh parser for one request (``harmony``: see `make_output_stream`)."""
        canonical = self.resolve(name)
        if canonical == "harmony":
            from vllm_mlx.tool_parsers.harmony import HarmonyParser

            return HarmonyParser(tools=tools, reasoning=False, tool_calls=True)
        return MarkedToolParser(TOOL_CALL_FORMATS[canonical], tools)

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
ToolParserManager = _ToolParsers("tool-call", TOOL_CALL_FORMATS, _MARKERS, _NAMES)
