"""Reasoning parsers, and the registry of their names, aliases and auto-detection.

Every parser splits model output into reasoning and content (see `delimited`); Harmony's
channels are parsed together with its tool calls in `vllm_mlx.tool_parsers.harmony`.
"""

from __future__ import annotations

from collections.abc import Iterable

from vllm_mlx.families.catalog import (
    REASONING_FORMATS,
    REASONING_MARKERS,
    REASONING_MODEL_NAMES,
)
from vllm_mlx.families.formats import ReasoningFormat
from vllm_mlx.families.registry import ParserRegistry, UnknownParserError
from vllm_mlx.reasoning.delimited import DelimitedReasoningParser

__all__ = ["DelimitedReasoningParser", "ReasoningParserManager", "UnknownParserError"]


class _ReasoningParsers(ParserRegistry[ReasoningFormat]):
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
ReasoningParserManager = _ReasoningParsers(
    "reasoning", REASONING_FORMATS, REASONING_MARKERS, REASONING_MODEL_NAMES
)
