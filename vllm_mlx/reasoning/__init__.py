"""Reasoning parsers: names, aliases, auto-detection and construction.

Every parser splits model output into reasoning and content (see `delimited`); Harmony's
channels are parsed together with its tool calls in `vllm_mlx.tool_parsers.harmony`.
"""

from __future__ import annotations

from collections.abc import Iterable

from vllm_mlx.chat.formats import REASONING_FORMATS, UnknownParserError
from vllm_mlx.chat.registry import ParserRegistry
from vllm_mlx.reasoning.delimited import DelimitedReasoningParser

__all__ = ["DelimitedReasoningParser", "ReasoningParserManager", "UnknownParserError"]


# (marker in the chat template or special tokens, parser), most specific first
_MARKERS = (
    ("<seed:think>", "seed_oss"),
    ("[THINK]", "mistral"),
    ("<|channel|>", "harmony"),
    ("<|channel>", "gemma4"),
)
# (substring of the lower-cased model name, parser), most specific first
_NAMES = (
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


class _ReasoningParsers(ParserRegistry):
    def create(self, name: str, prompt_tail: str = "") -> DelimitedReasoningParser:
        """A fresh parser for one request (not for ``harmony``, see `make_output_stream`)."""
        return DelimitedReasoningParser(REASONING_FORMATS[self.resolve(name)], prompt_tail)

    def detect(
        self, model_name: str, chat_template: str | None, special_tokens: Iterable[str]
    ) -> str | None:
        """Markers, then the model name, then a bare ``<think>`` read by the model's family."""
        special_tokens = set(special_tokens)
        found = self.match(model_name, chat_template, special_tokens)
        if found is not None:
            return found
        if "<think>" in special_tokens or "<think>" in (chat_template or ""):
            lowered = model_name.lower()
            if "glm" in lowered:
                return "glm45"
            if "deepseek" in lowered and "r1" in lowered:
                return "deepseek_r1"
            return "qwen3"
        return None


# The registry of reasoning parsers.
ReasoningParserManager = _ReasoningParsers("reasoning", REASONING_FORMATS, _MARKERS, _NAMES)
