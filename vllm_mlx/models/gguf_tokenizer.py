"""Rebuild a Hugging Face ``tokenizer.json`` from a GGUF file's vocabulary metadata.

llama.cpp stores a byte-level BPE tokenizer as its token strings, merges and token types plus a
pre-tokenizer name; the split rules behind that name live in llama.cpp's C++ code. This module
maps the names we support to the equivalent ``tokenizers`` pipeline, so the rebuilt tokenizer
produces the same ids the model was trained on. SentencePiece vocabularies (tokenizer model
``llama``) are rebuilt as a byte-fallback BPE whose merges come from the token scores.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
)

from vllm_mlx.models.errors import ModelLoadError

# llama.cpp token types (llama_token_type).
TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4

# The Llama 3 split pattern (llama.cpp pre-tokenizer "llama-bpe").
_LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


# Qwen2's split pattern (llama.cpp pre-tokenizer "qwen2"): like Llama 3 but single digits.
_QWEN2_PATTERN = _LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")


def _gpt2_pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def _individual_digits_pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    # llama.cpp's "smollm"/"starcoder"/"refact": split every digit, then GPT-2's regex.
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )


def _split_then_bytes(pattern: str) -> Callable[[], pre_tokenizers.PreTokenizer]:
    def build() -> pre_tokenizers.PreTokenizer:
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )

    return build


PRE_TOKENIZERS: dict[str, Callable[[], pre_tokenizers.PreTokenizer]] = {
    "default": _gpt2_pre_tokenizer,
    "gpt-2": _gpt2_pre_tokenizer,
    "smollm": _individual_digits_pre_tokenizer,
    "starcoder": _individual_digits_pre_tokenizer,
    "refact": _individual_digits_pre_tokenizer,
    "llama-bpe": _split_then_bytes(_LLAMA3_PATTERN),
    "llama3": _split_then_bytes(_LLAMA3_PATTERN),
    "qwen2": _split_then_bytes(_QWEN2_PATTERN),
}
# Pre-tokenizers whose original tokenizer.json also NFC-normalizes the input.
NFC_NORMALIZED = frozenset({"qwen2"})
# Vocabularies where a pre-token found whole in the vocabulary is not split by merges
# (llama.cpp's ``ignore_merges``; ``ignore_merges: true`` in Llama 3's tokenizer.json).
IGNORE_MERGES = frozenset({"llama-bpe", "llama3"})


def _metadata_int(metadata: dict[str, Any], key: str) -> int | None:
    value = metadata.get(key)
    if value is None:
        return None
    return int(value.item() if hasattr(value, "item") else value)


def _metadata_bool(metadata: dict[str, Any], key: str, default: bool) -> bool:
    value = metadata.get(key)
    if value is None:
        return default
    return bool(value.item() if hasattr(value, "item") else value)


def _token_types(metadata: dict[str, Any], vocab_size: int) -> list[int]:
    types = metadata.get("tokenizer.ggml.token_type")
    if types is None:
        return [1] * vocab_size
    types = types.tolist() if hasattr(types, "tolist") else list(types)
    if len(types) != vocab_size:
        raise ModelLoadError(f"GGUF tokenizer has {vocab_size} tokens but {len(types)} token types")
    return [int(t) for t in types]


def _byte_level_bpe(metadata: dict[str, Any], tokens: Sequence[str]) -> Tokenizer:
    """GGUF tokenizer model ``gpt2``: byte-level BPE with a named pre-tokenizer."""
    pre_name = metadata.get("tokenizer.ggml.pre", "default")
    if pre_name not in PRE_TOKENIZERS:
        raise ModelLoadError(
            f"GGUF pre-tokenizer {pre_name!r} is not supported; "
            f"supported: {', '.join(sorted(PRE_TOKENIZERS))}"
        )
    merges: Sequence[str] = metadata.get("tokenizer.ggml.merges") or []
    if not merges:
        raise ModelLoadError("GGUF file has a gpt2 tokenizer without tokenizer.ggml.merges")
    vocab = {token: index for index, token in enumerate(tokens)}
    merge_pairs = [(left, right) for left, _, right in (m.partition(" ") for m in merges)]
    model = models.BPE(
        vocab=vocab, merges=merge_pairs, fuse_unk=False, ignore_merges=pre_name in IGNORE_MERGES
    )
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = PRE_TOKENIZERS[pre_name]()
    if pre_name in NFC_NORMALIZED:
        tokenizer.normalizer = normalizers.NFC()
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    return tokenizer


def sentencepiece_merges(
    tokens: Sequence[str], scores: Sequence[float], types: Sequence[int]
) -> list[tuple[str, str]]:
    """Derive BPE merges from SentencePiece scores, which GGUF stores instead of merges.

    SentencePiece BPE merges the pair whose result has the highest score, so every split of a
    normal piece into two known pieces is a merge ranked by the piece's score (the same rule
    as transformers' SentencePiece and GGUF converters).
    """
    score = {token: value for token, value in zip(tokens, scores, strict=True)}
    ranked: list[tuple[float, str, str]] = []
    for piece, kind in zip(tokens, types, strict=True):
        if kind != TOKEN_TYPE_NORMAL:
            continue
        splits = [
            (piece[:cut], piece[cut:])
            for cut in range(1, len(piece))
            if piece[:cut] in score and piece[cut:] in score
        ]
        splits.sort(key=lambda pair: (score[pair[0]], score[pair[1]]), reverse=True)
        ranked.extend((score[piece], left, right) for left, right in splits)
    ranked.sort(key=lambda merge: merge[0], reverse=True)  # stable: keeps the split order
    return [(left, right) for _, left, right in ranked]


def _sentencepiece_bpe(metadata: dict[str, Any], tokens: Sequence[str]) -> Tokenizer:
    """GGUF tokenizer model ``llama``: SentencePiece BPE with byte fallback (Llama 2, Mistral)."""
    raw_scores = metadata.get("tokenizer.ggml.scores")
    if raw_scores is None:
        raise ModelLoadError("GGUF file has a SentencePiece tokenizer without token scores")
    scores = raw_scores.tolist() if hasattr(raw_scores, "tolist") else list(raw_scores)
    types = _token_types(metadata, len(tokens))
    merges = metadata.get("tokenizer.ggml.merges")
    merge_pairs = (
        [tuple(merge.split(" ", 1)) for merge in merges]
        if merges
        else sentencepiece_merges(tokens, scores, types)
    )
    unk_id = _metadata_int(metadata, "tokenizer.ggml.unknown_token_id")
    model = models.BPE(
        vocab={token: index for index, token in enumerate(tokens)},
        merges=merge_pairs,
        unk_token=tokens[unk_id] if unk_id is not None else None,
        fuse_unk=True,
        byte_fallback=True,
    )
    tokenizer = Tokenizer(model)
    add_prefix = _metadata_bool(metadata, "tokenizer.ggml.add_space_prefix", True)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="▁", prepend_scheme="first" if add_prefix else "never", split=False
    )
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if add_prefix:
        steps.append(decoders.Strip(content=" ", left=1, right=0))
    tokenizer.decoder = decoders.Sequence(steps)
    return tokenizer


TOKENIZER_MODELS: dict[str, Callable[[dict[str, Any], Sequence[str]], Tokenizer]] = {
    "gpt2": _byte_level_bpe,
    "llama": _sentencepiece_bpe,
}


def build_tokenizer(metadata: dict[str, Any]) -> Tokenizer:
    """Return the tokenizer the GGUF metadata describes, special tokens and BOS rule included."""
    model_name = metadata.get("tokenizer.ggml.model")
    if model_name not in TOKENIZER_MODELS:
        raise ModelLoadError(
            f"GGUF tokenizer model {model_name!r} is not supported by vllm-mlx's importer; "
            f"supported: {', '.join(TOKENIZER_MODELS)}"
        )
    tokens: Sequence[str] = metadata.get("tokenizer.ggml.tokens") or []
    if not tokens:
        raise ModelLoadError("GGUF file has no tokenizer.ggml.tokens")
    tokenizer = TOKENIZER_MODELS[model_name](metadata, tokens)

    types = _token_types(metadata, len(tokens))
    added = [
        AddedToken(token, special=kind == TOKEN_TYPE_CONTROL, normalized=False)
        for token, kind in zip(tokens, types, strict=True)
        if kind in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED)
    ]
    tokenizer.add_tokens(added)

    bos_id = _metadata_int(metadata, "tokenizer.ggml.bos_token_id")
    if bos_id is not None and _metadata_bool(metadata, "tokenizer.ggml.add_bos_token", False):
        bos = tokens[bos_id]
        add_bos = processors.TemplateProcessing(
            single=f"{bos}:0 $A:0",
            pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
            special_tokens=[(bos, bos_id)],
        )
        steps = [tokenizer.post_processor] if tokenizer.post_processor else []
        tokenizer.post_processor = processors.Sequence([*steps, add_bos])
    return tokenizer


def special_token_names(metadata: dict[str, Any]) -> dict[str, str]:
    """Map ``bos_token``/``eos_token``/``unk_token``/``pad_token`` to their strings."""
    tokens: Sequence[str] = metadata["tokenizer.ggml.tokens"]
    names = {}
    for role in ("bos", "eos", "unknown", "padding"):
        token_id = _metadata_int(metadata, f"tokenizer.ggml.{role}_token_id")
        if token_id is not None and 0 <= token_id < len(tokens):
            key = {"unknown": "unk", "padding": "pad"}.get(role, role)
            names[f"{key}_token"] = tokens[token_id]
    return names


def write_tokenizer_files(
    metadata: dict[str, Any], out_dir: Path, context_length: int | None
) -> None:
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json."""
    tokenizer = build_tokenizer(metadata)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    specials = special_token_names(metadata)
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": False,
        "add_bos_token": _metadata_bool(metadata, "tokenizer.ggml.add_bos_token", False),
        "add_eos_token": _metadata_bool(metadata, "tokenizer.ggml.add_eos_token", False),
        **specials,
    }
    if context_length:
        config["model_max_length"] = context_length
    chat_template = metadata.get("tokenizer.chat_template")
    if chat_template:
        config["chat_template"] = chat_template
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (out_dir / "special_tokens_map.json").write_text(json.dumps(specials, indent=2))
