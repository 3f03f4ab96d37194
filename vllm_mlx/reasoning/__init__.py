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
        """Markers, then the model name, then a ``<think>`` read by the model's family. A
        model's own template decides: a family named by the model id, or ``<think>`` in the
        vocabulary, counts only when the template writes that family's markers (a
        non-thinking coder model shares its thinking sibling's name and vocabulary)."""
        special_tokens = set(special_tokens)
        template = chat_template or ""
        found = self.match("", template, special_tokens)
        if found is not None:
            return found
        named = self.match(model_name, None, ())
        if named is not None and (not template or self._writes(named, template)):
            return named
        think_tokens = special_tokens if not template else ()
        if "<think>" in think_tokens or "<think>" in template or "</think>" in template:
            lowered = model_name.lower()
            if "glm" in lowered:
                return "glm45"
            if "deepseek" in lowered and "r1" in lowered:
                return "deepseek_r1"
            return "qwen3"
        return None

    def _writes(self, name: str, template: str) -> bool:
        """Does the template write any of the family's reasoning markers?"""
        fmt = self.formats[name]
        pairs = ((fmt.start, fmt.end), *fmt.alternatives)
        markers = [m.strip() for pair in pairs for m in pair] + list(fmt.dropped)
        return any(marker and marker in template for marker in markers)


# The registry of reasoning parsers.
ReasoningParserManager = _ReasoningParsers(
    "reasoning", REASONING_FORMATS, REASONING_MARKERS, REASONING_MODEL_NAMES
)
