"""What a model folder serves, read from its files before any weight is loaded.

An encoder (BERT, XLM-RoBERTa, ModernBERT, Nomic) is an embedding model, or a cross-encoder
reranker when its architecture is ``*ForSequenceClassification``. A decoder is an
embedding model when sentence-transformers files say so (Qwen3-Embedding ships
``modules.json`` and ``1_Pooling``), a yes/no reranker when its config names the tokens it
scores with (``classifier_from_token``, vLLM's convention) or its folder is a
Qwen3-Reranker; every other decoder is a chat model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Kind = Literal["embedding", "cross_encoder", "yes_no_reranker"]
KIND_NAMES: dict[str, str] = {
    "embedding": "an embedding model",
    "cross_encoder": "a cross-encoder reranker",
    "yes_no_reranker": "a yes/no reranker",
}
Pooling = Literal["mean", "cls", "last"]

ENCODER_TYPES = {"bert", "xlm-roberta", "xlm_roberta", "roberta", "modernbert", "nomic_bert"}
# sentence-transformers' 1_Pooling/config.json keys, in the order they are tried
_POOLING_KEYS: tuple[tuple[str, Pooling], ...] = (
    ("pooling_mode_cls_token", "cls"),
    ("pooling_mode_lasttoken", "last"),
    ("pooling_mode_mean_tokens", "mean"),
)


@dataclass(frozen=True)
class ModelFacts:
    """What serving an embedding or reranking model needs to know of it."""

    kind: Kind
    model_type: str
    pooling: Pooling
    max_length: int | None  # the longest input, in tokens, when the files say
    matryoshka: bool | tuple[int, ...]  # truncatable output: any size, or these sizes
    score_tokens: tuple[str, str] = ("no", "yes")  # a yes/no reranker's (negative, positive)


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def model_facts(folder: Path) -> ModelFacts | None:
    """The folder's embedding/reranking facts, or None for a chat model (or no model)."""
    config = read_json(folder / "config.json")
    model_type = str(config.get("model_type", "")).lower()
    if not model_type:
        return None
    kind = _kind(folder, config, model_type)
    if kind is None:
        return None
    return ModelFacts(
        kind=kind,
        model_type=model_type.replace("-", "_"),
        pooling=_pooling(folder, model_type, kind),
        max_length=_max_length(folder, config, model_type),
        matryoshka=_matryoshka(config),
        score_tokens=_score_tokens(config),
    )


def _kind(folder: Path, config: dict[str, Any], model_type: str) -> Kind | None:
    architectures = [str(a) for a in config.get("architectures") or []]
    if model_type in ENCODER_TYPES:
        if any(a.endswith("ForSequenceClassification") for a in architectures):
            return "cross_encoder"
        return "embedding"
    if config.get("classifier_from_token") or "reranker" in folder.name.lower():
        return "yes_no_reranker"
    if (folder / "modules.json").is_file() or (folder / "1_Pooling").is_dir():
        return "embedding"
    return None


def _pooling(folder: Path, model_type: str, kind: Kind) -> Pooling:
    """The pooling sentence-transformers declares; else CLS for a cross-encoder, mean for
    an encoder, the last token for a decoder."""
    declared = read_json(folder / "1_Pooling" / "config.json")
    for key, pooling in _POOLING_KEYS:
        if declared.get(key) is True:
            return pooling
    if kind == "cross_encoder":
        return "cls"
    return "mean" if model_type in ENCODER_TYPES else "last"


def _max_length(folder: Path, config: dict[str, Any], model_type: str) -> int | None:
    """sentence-transformers' ``max_seq_length``, else the tokenizer's
    ``model_max_length`` (when it is not transformers' "unlimited" placeholder), never past
    the position table (RoBERTa's keeps two rows for its padding offset): a position past it
    would index outside the weights."""
    positions = _positive(config.get("max_position_embeddings"))
    if positions is not None and model_type in ("xlm-roberta", "xlm_roberta", "roberta"):
        positions -= 2
    declared = _positive(read_json(folder / "sentence_bert_config.json").get("max_seq_length"))
    if declared is None:
        declared = _positive(read_json(folder / "tokenizer_config.json").get("model_max_length"))
        declared = declared if declared is not None and declared < 1_000_000 else None
    if declared is None or positions is None:
        return declared or positions
    return min(declared, positions)


def _positive(value: object) -> int | None:
    """``value`` as a positive int (a float like 512.0 too), else None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return int(value)
    return None


def _matryoshka(config: dict[str, Any]) -> bool | tuple[int, ...]:
    """Whether the output may be truncated (vLLM's config keys): ``matryoshka_dimensions``
    lists the sizes trained for, ``is_matryoshka`` allows any."""
    sizes = config.get("matryoshka_dimensions")
    if isinstance(sizes, list) and sizes and all(_positive(s) is not None for s in sizes):
        return tuple(int(s) for s in sizes)
    return config.get("is_matryoshka") is True


def _score_tokens(config: dict[str, Any]) -> tuple[str, str]:
    """The tokens a yes/no reranker compares, (negative, positive): vLLM's
    ``classifier_from_token``, else Qwen3-Reranker's "no" and "yes"."""
    tokens = config.get("classifier_from_token")
    if isinstance(tokens, list) and len(tokens) == 2 and all(isinstance(t, str) for t in tokens):
        return tokens[0], tokens[1]
    return "no", "yes"
