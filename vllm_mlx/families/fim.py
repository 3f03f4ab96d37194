"""Fill-in-the-middle: each code family's own tokens and the order it was trained on.

A FIM prompt is the code before the gap (prefix) and after it (suffix) between the
family's special tokens; the model writes the middle. Most families put the prefix first
(PSM: ``PRE prefix SUF suffix MID``); Codestral puts the suffix first and has no middle
token (``[SUFFIX] suffix [PREFIX] prefix``). Repository-level families also have a token
that starts each file of context (``file_sep``) and one before the project's name.

A model's format is found from its tokenizer's vocabulary (``detect_fim``): the first
family whose prefix and suffix tokens (and middle token, if it has one) are all there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class FimFormat:
    name: str
    prefix: str
    suffix: str
    middle: str | None  # None: generation starts right after the last part (Codestral)
    order: Literal["psm", "spm"] = "psm"  # prefix-suffix-middle, or suffix first
    file_sep: str | None = None  # starts each file of repository context
    repo_name: str | None = None  # before the project's name, ahead of the files
    # tokens after which the middle is over (besides the tokenizer's end of sequence)
    stops: tuple[str, ...] = ()

    def tokens(self) -> tuple[str, ...]:
        """The tokens a vocabulary must hold for this format."""
        return (self.prefix, self.suffix, *((self.middle,) if self.middle else ()))


# The families, each once (token texts as their tokenizers spell them).
FIM_FORMATS: tuple[FimFormat, ...] = (
    # Qwen2.5-Coder, Qwen3-Coder; CodeGemma spells its tokens the same way
    FimFormat(
        "qwen",
        "<|fim_prefix|>",
        "<|fim_suffix|>",
        "<|fim_middle|>",
        file_sep="<|file_sep|>",
        repo_name="<|repo_name|>",
        stops=("<|fim_pad|>", "<|file_sep|>", "<|repo_name|>", "<|endoftext|>"),
    ),
    # DeepSeek-Coder (fullwidth bars, U+2581 for the spaces)
    FimFormat("deepseek", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),
    # CodeLlama (SentencePiece's U+2581 before each marker)
    FimFormat("codellama", "▁<PRE>", "▁<SUF>", "▁<MID>", stops=("▁<EOT>",)),
    # StarCoder / StarCoder2, SmolLM, Granite Code
    FimFormat(
        "starcoder",
        "<fim_prefix>",
        "<fim_suffix>",
        "<fim_middle>",
        file_sep="<file_sep>",
        repo_name="<repo_name>",
        stops=("<fim_pad>", "<file_sep>", "<|endoftext|>"),
    ),
    # Codestral (Mistral's control tokens), suffix first
    FimFormat("codestral", "[PREFIX]", "[SUFFIX]", None, order="spm"),
)


def detect_fim(vocabulary: Mapping[str, int]) -> FimFormat | None:
    """The FIM format whose tokens ``vocabulary`` holds, or None (no FIM tokens)."""
    for fmt in FIM_FORMATS:
        if all(token in vocabulary for token in fmt.tokens()):
            return fmt
    return None
