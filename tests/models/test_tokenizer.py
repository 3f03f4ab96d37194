"""The GGUF tokenizer rebuild for SentencePiece vocabularies (tokenizer model ``llama``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlx_lm.tokenizer_utils import SPMStreamingDetokenizer
from mlx_lm.utils import load_tokenizer
from tokenizers import pre_tokenizers

from vllm_mlx.models import ModelLoadError
from vllm_mlx.models.gguf_tokenizer import sentencepiece_merges, write_tokenizer_files

SPECIALS = ["<unk>", "<s>", "</s>"]
BYTES = [f"<0x{value:02X}>" for value in range(256)]
# Most useful first, as SentencePiece scores them.
PIECES = ["▁t", "he", "▁the", "at", "▁c", "▁cat", "▁", "t", "h", "e", "a", "c", "s"]


def spm_metadata(add_bos: bool = True) -> dict:
    tokens = SPECIALS + BYTES + PIECES
    return {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": [0.0] * (len(SPECIALS) + len(BYTES))
        + [-float(rank) for rank in range(len(PIECES))],
        "tokenizer.ggml.token_type": [2, 3, 3] + [6] * len(BYTES) + [1] * len(PIECES),
        "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.add_bos_token": add_bos,
        "tokenizer.chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}",
    }


def piece_id(piece: str) -> int:
    return (SPECIALS + BYTES + PIECES).index(piece)


def test_merges_are_derived_from_scores() -> None:
    metadata = spm_metadata()
    merges = sentencepiece_merges(
        metadata["tokenizer.ggml.tokens"],
        metadata["tokenizer.ggml.scores"],
        metadata["tokenizer.ggml.token_type"],
    )
    assert merges == [("▁", "t"), ("h", "e"), ("▁t", "he"), ("a", "t"), ("▁", "c"), ("▁c", "at")]


def test_sentencepiece_tokenizer_round_trips_with_byte_fallback(tmp_path: Path) -> None:
    write_tokenizer_files(spm_metadata(), tmp_path, context_length=64)
    tokenizer = load_tokenizer(tmp_path)
    assert tokenizer.encode("the cat") == [1, piece_id("▁the"), piece_id("▁cat")]
    assert tokenizer.encode("the cat", add_special_tokens=False)[0] == piece_id("▁the")
    assert tokenizer.encode("</s>", add_special_tokens=False) == [2]
    unicode_ids = tokenizer.encode("日", add_special_tokens=False)
    assert unicode_ids == [piece_id("▁"), *(piece_id(f"<0x{b:02X}>") for b in "日".encode())]
    for text in ["the cat", "the  cat sat", "日本 the</s>"]:
        assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text
    assert isinstance(tokenizer.detokenizer, SPMStreamingDetokenizer)
    assert tokenizer.eos_token_id == 2


def test_sentencepiece_without_bos_adds_none(tmp_path: Path) -> None:
    write_tokenizer_files(spm_metadata(add_bos=False), tmp_path, context_length=None)
    assert load_tokenizer(tmp_path).encode("the") == [piece_id("▁the")]


def test_unknown_tokenizer_model_is_named(tmp_path: Path) -> None:
    metadata = spm_metadata() | {"tokenizer.ggml.model": "bert"}
    with pytest.raises(ModelLoadError, match="tokenizer model 'bert' is not supported.*gpt2"):
        write_tokenizer_files(metadata, tmp_path, context_length=None)


@pytest.mark.parametrize(("pre", "whole"), [("llama-bpe", True), ("gpt-2", False)])
def test_llama3_vocabularies_take_whole_words_before_merges(
    tmp_path: Path, pre: str, whole: bool
) -> None:
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokens = ["<|begin_of_text|>", *alphabet, "Ġc", "Ġcat"]  # no merge reaches "Ġcat"
    metadata = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.merges": ["Ġ c"],
        "tokenizer.ggml.token_type": [3] + [1] * (len(tokens) - 1),
        "tokenizer.ggml.bos_token_id": 0,
        "tokenizer.ggml.add_bos_token": True,
    }
    write_tokenizer_files(metadata, tmp_path, context_length=None)
    tokenizer = load_tokenizer(tmp_path)
    ids = tokenizer.encode(" cat")
    assert ids[0] == 0  # BOS
    expected = [tokens.index("Ġcat")] if whole else [tokens.index(p) for p in ("Ġc", "a", "t")]
    assert ids[1:] == expected
