"""Fill-in-the-middle prompts in each family's own tokens and order, from tiny tokenizers
whose vocabularies hold that family's FIM tokens (token spellings as the families' own
tokenizers have them: Qwen2.5-Coder, DeepSeek-Coder, CodeLlama, StarCoder2, Codestral)."""

from __future__ import annotations

import pytest
from tiny_models import build_tiny_tokenizer

from vllm_mlx.chat.fim import fim_format, fim_prompt, stop_ids
from vllm_mlx.families.fim import FIM_FORMATS, detect_fim

BY_NAME = {fmt.name: fmt for fmt in FIM_FORMATS}
PREFIX, SUFFIX = "def add(a, b):\n    ", "\n\nprint(add(1, 2))"


def tokenizer_for(name: str):
    fmt = BY_NAME[name]
    extra = (*fmt.tokens(), *(t for t in (fmt.file_sep, fmt.repo_name) if t), *fmt.stops)
    return build_tiny_tokenizer(extra_special=tuple(dict.fromkeys(extra)))


def ids(tokenizer, *parts: str) -> list[int]:
    """Special tokens by id, other parts as text (no special tokens added)."""
    vocab = tokenizer.get_vocab()
    out: list[int] = []
    for part in parts:
        out += [vocab[part]] if part in vocab else tokenizer.encode(part, add_special_tokens=False)
    return out


@pytest.mark.parametrize(
    ("name", "order"),
    [
        ("qwen", ["<|fim_prefix|>", PREFIX, "<|fim_suffix|>", SUFFIX, "<|fim_middle|>"]),
        ("deepseek", ["<｜fim▁begin｜>", PREFIX, "<｜fim▁hole｜>", SUFFIX, "<｜fim▁end｜>"]),
        ("codellama", ["▁<PRE>", PREFIX, "▁<SUF>", SUFFIX, "▁<MID>"]),
        ("starcoder", ["<fim_prefix>", PREFIX, "<fim_suffix>", SUFFIX, "<fim_middle>"]),
        ("codestral", ["[SUFFIX]", SUFFIX, "[PREFIX]", PREFIX]),
    ],
)
def test_each_family_gets_its_tokens_in_its_order(name, order):
    tokenizer = tokenizer_for(name)
    fmt = fim_format(tokenizer)
    assert fmt is not None and fmt.name == name
    assert fim_prompt(tokenizer, fmt, PREFIX, SUFFIX) == ids(tokenizer, *order)


def test_a_vocabulary_without_fim_tokens_has_no_format():
    assert fim_format(build_tiny_tokenizer()) is None
    assert detect_fim({"<fim_prefix>": 1, "<fim_suffix>": 2}) is None  # no middle token


def test_marker_spellings_in_the_code_stay_text():
    tokenizer = tokenizer_for("qwen")
    fmt = BY_NAME["qwen"]
    prompt = fim_prompt(tokenizer, fmt, "x = '<|fim_suffix|>'", "")
    marker = tokenizer.get_vocab()["<|fim_suffix|>"]
    assert prompt.count(marker) == 1  # only the real one, after the prefix


def test_repository_context_goes_first_behind_the_family_separators():
    tokenizer = tokenizer_for("qwen")
    fmt = BY_NAME["qwen"]
    extra = [("util.py", "def helper(): pass")]
    prompt = fim_prompt(tokenizer, fmt, PREFIX, SUFFIX, prompt="return", extra=extra)
    expected = ids(
        tokenizer,
        "<|repo_name|>",
        "project\n",
        "<|file_sep|>",
        "util.py\ndef helper(): pass",
        "<|fim_prefix|>",
        PREFIX,
        "return",
        "<|fim_suffix|>",
        SUFFIX,
        "<|fim_middle|>",
    )
    assert prompt == expected
    assert sorted(stop_ids(tokenizer, fmt)) == sorted(
        ids(tokenizer, "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>", "<|endoftext|>")
    )
