"""Reasoning parsers: names, aliases, auto-detection and construction.

Every parser splits model output into reasoning and content (see `delimited`); Harmony's
channels are parsed together with its tool calls in `vllm_mlx.tool_parsers.harmony`.
"""

from __future__ import annotations

from collections.abc import Iterable

from vllm_mlx.chat.formats import REASONING_FORMATS, UnknownParserError
from vllm_mlx.reasoning.delimited import DelimitedReasoningParser

__all__ = ["DelimitedReasoningParser", "ReasoningParserManager", "UnknownParserError"]


def _key(name: str) -> str:
    return name.strip().lower().replace("-", "_")


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


class ReasoningParserManager:
    """The registry of reasoning parsers."""

    @staticmethod
    def names() -> list[str]:
        """Canonical names."""
        return sorted(REASONING_FORMATS)

    @staticmethod
    def aliases() -> dict[str, str]:
        """Alias -> canonical name."""
        return {a: f.name for f in REASONING_FORMATS.values() for a in f.aliases}

    @classmethod
    def resolve(cls, name: str) -> str:
        """The canonical name for a name or alias; `UnknownParserError` otherwise."""
        wanted = _key(name)
        for fmt in REASONING_FORMATS.values():
            if wanted in {_key(n) for n in (fmt.name, *fmt.aliases)}:
                return fmt.name
        raise UnknownParserError("reasoning", name, [*cls.names(), *cls.aliases()])

    @classmethod
    def create(cls, name: str, prompt_tail: str = "") -> DelimitedReasoningParser:
        """A fresh parser for one request (not for ``harmony``, see `make_output_stream`)."""
        return DelimitedReasoningParser(REASONING_FORMATS[cls.resolve(name)], prompt_tail)

    @staticmethod
    def detect(
        model_name: str, chat_template: str | None, special_tokens: Iterable[str]
    ) -> str | None:
        """Guess the parser from the tokenizer's markers first, then from the model name."""
        tokens = set(special_tokens)
        template = chat_template or ""
        for marker, parser in _MARKERS:
            if marker in tokens or marker in template:
                return parser
        lowered = model_name.lower()
        for fragment, parser in _NAMES:
            if fragment in lowered:
                return parser
        if "<think>" in tokens or "<think>" in template:
            if "glm" in lowered:
                return "glm45"
            if "deepseek" in lowered and "r1" in lowered:
                return "deepseek_r1"
            return "qwen3"
        return None
