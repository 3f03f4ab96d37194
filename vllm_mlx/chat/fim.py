"""The fill-in-the-middle prompt in a model's own tokens (``families.fim``).

The FIM markers go in as token ids, never as text, so code that happens to contain a
marker's spelling stays text; the parts are tokenized without special tokens, and the
beginning-of-sequence token leads when the tokenizer adds one to every text.
"""

from __future__ import annotations

from ..families.fim import FimFormat, detect_fim
from ..protocols import Tokenizer

PROJECT = "project"  # the repository name repository-level formats are given


def vocabulary(tokenizer: Tokenizer) -> dict[str, int]:
    return dict(tokenizer.get_vocab())


def fim_format(tokenizer: Tokenizer) -> FimFormat | None:
    """The model's FIM format, from its vocabulary (None: it has no FIM tokens)."""
    return detect_fim(vocabulary(tokenizer))


def stop_ids(tokenizer: Tokenizer, fmt: FimFormat) -> list[int]:
    """The ids of the tokens that end a middle, those this vocabulary has."""
    vocab = vocabulary(tokenizer)
    return [vocab[token] for token in fmt.stops if token in vocab]


def fim_prompt(
    tokenizer: Tokenizer,
    fmt: FimFormat,
    prefix_text: str,
    suffix_text: str,
    prompt: str = "",
    extra: list[tuple[str, str]] | None = None,
) -> list[int]:
    """``[BOS] [context files] PRE prefix prompt SUF suffix MID`` (or the suffix first);
    ``extra`` holds (file name, text) pairs of other files."""
    vocab = vocabulary(tokenizer)

    def text(value: str) -> list[int]:
        if not value:
            return []
        return list(tokenizer.encode(value, add_special_tokens=False, split_special_tokens=True))

    head = _files(vocab, fmt, extra or [], text)
    prefix = [vocab[fmt.prefix], *text(prefix_text), *text(prompt)]
    suffix = [vocab[fmt.suffix], *text(suffix_text)]
    body = prefix + suffix if fmt.order == "psm" else suffix + prefix
    middle = [vocab[fmt.middle]] if fmt.middle else []
    return _bos(tokenizer) + head + body + middle


def _files(vocab: dict[str, int], fmt: FimFormat, extra: list[tuple[str, str]], text) -> list:
    """Other files ahead of the gap: each after the family's file separator (and the
    project's name first), or as ``name`` then text where the family has no separator."""
    if not extra:
        return []
    out: list[int] = []
    sep = vocab.get(fmt.file_sep) if fmt.file_sep else None
    if sep is None:
        for name, content in extra:
            out += text(f"{name}\n{content}\n\n")
        return out
    repo = vocab.get(fmt.repo_name) if fmt.repo_name else None
    if repo is not None:
        out += [repo, *text(f"{PROJECT}\n")]
    for name, content in extra:
        out += [sep, *text(f"{name}\n{content}")]
    return out


def _bos(tokenizer: Tokenizer) -> list[int]:
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return []
    return [bos] if bos in tokenizer.encode("", add_special_tokens=True) else []
