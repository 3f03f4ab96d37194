"""Embedding models and cross-encoders loaded through mlx-embeddings' own model classes.

mlx-embeddings pools inside some models (ModernBERT by ``classifier_pooling``) and leaves the
hidden states to us in others; BERT, XLM-RoBERTa and Qwen3 are pooled here the way the
model's sentence-transformers files declare (``kinds.model_facts``), which is what the
model was trained for. mlx-embeddings has no sequence-classification head for BERT and
XLM-RoBERTa, so a cross-encoder is its encoder under the head transformers defines
(BERT: the pooler then a linear layer; RoBERTa: dense, tanh, out_proj on the first token),
with transformers' weight names (``bert.*``, ``roberta.*``, ``classifier.*``).
"""

from __future__ import annotations

import glob
import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import mlx.core as mx
import mlx.nn as nn

from ..protocols import SizedTokenizer
from .kinds import ModelFacts
from .service import Embedder, EmbeddingError, Encoded, Reranker, padded, pool

# how each model type's forward takes its inputs beyond input_ids and attention_mask
_TAKES_TYPES = {"bert", "xlm_roberta"}
_POOLED_HERE = {"bert", "xlm_roberta", "roberta", "qwen3"}


# Abramowitz & Stegun 7.1.28: erf(z) = 1 - (1 + a1 z + ... + a6 z^6)^-16 for z >= 0,
# |error| <= 3e-7, from multiplies, adds and one division.
_ERF = (0.0705230784, 0.0422820123, 0.0092705272, 0.0001520143, 0.0002765672, 0.0000430638)


@mx.compile
def gelu_without_erf(x: mx.array) -> mx.array:
    z = mx.abs(x) * 0.7071067811865476
    p = 1 + z * (
        _ERF[0] + z * (_ERF[1] + z * (_ERF[2] + z * (_ERF[3] + z * (_ERF[4] + z * _ERF[5]))))
    )
    p = p * p
    p = p * p
    p = p * p
    p = p * p
    erf = 1 - 1 / p
    return 0.5 * x * (1 + mx.where(x < 0, -erf, erf))


class _ArithmeticGELU(nn.Module):
    """Exact GELU to ~1e-6 without ``erf``, which MLX's CPU backend computes one element at a
    time: over a BERT's activations it is 13x faster (and the activations were most of the
    forward pass)."""

    def __call__(self, x: mx.array) -> mx.array:
        return gelu_without_erf(x)


class _RobertaIntermediate(nn.Module):
    """XLM-RoBERTa's intermediate layer (dense, GELU), with the GELU above."""

    def __init__(self, dense: nn.Module):
        super().__init__()
        self.dense = dense

    def __call__(self, x: mx.array) -> mx.array:
        return gelu_without_erf(self.dense(x))


def use_arithmetic_gelu(model: nn.Module) -> None:
    """On the CPU, swap the model's erf GELUs for ``_ArithmeticGELU`` (weights untouched)."""
    if mx.default_device() != mx.cpu:
        return
    for _, module in model.named_modules():
        for key, child in list(module.items()):
            if isinstance(child, nn.GELU) and child._approx in ("none", "precise"):
                module[key] = _ArithmeticGELU()
            elif type(child).__name__ == "XLMRobertaIntermediate":
                module[key] = _RobertaIntermediate(child.dense)


class ModelUnsupported(EmbeddingError):
    """mlx-embeddings has no class for this model type."""


def _architecture(model_type: str) -> Any:
    name = "xlm_roberta" if model_type == "roberta" else model_type
    try:
        return importlib.import_module(f"mlx_embeddings.models.{name}")
    except ImportError:
        raise ModelUnsupported(
            f"model type {model_type!r} is not supported by mlx-embeddings"
        ) from None


def _tokenizer(folder: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def _vocab_rows(model: Any, tokenizer: SizedTokenizer) -> int:
    """Ids a request may use: the tokenizer's, cut to the embedding table's rows."""
    rows = getattr(getattr(model, "config", None), "vocab_size", None)
    count = len(tokenizer)
    return min(count, rows) if isinstance(rows, int) and rows > 0 else count


class EncoderEmbedder(Embedder):
    """An mlx-embeddings text model (BERT, XLM-RoBERTa, ModernBERT, Qwen3-Embedding...)."""

    def __init__(self, name: str, folder: Path, facts: ModelFacts):
        from mlx_embeddings.utils import load_model

        arch = _architecture(facts.model_type)
        overrides = {}
        if facts.model_type == "modernbert":  # it pools inside: make it pool as declared
            overrides["classifier_pooling"] = "cls" if facts.pooling == "cls" else "mean"
        self.model = load_model(
            folder,
            model_config=overrides,
            get_model_classes=lambda config: (arch.Model, arch.ModelArgs, None, None),
        )
        use_arithmetic_gelu(self.model)
        self.tokenizer = _tokenizer(folder)
        self.name = name
        self.model_type = facts.model_type
        self.pooling = facts.pooling if facts.model_type in _POOLED_HERE else None
        self.matryoshka = facts.matryoshka
        self.vocab_size = _vocab_rows(self.model, self.tokenizer)
        self.max_length = facts.max_length or 512
        self.pad_id = self.tokenizer.pad_token_id or 0
        self.dimensions = int(self.model.config.hidden_size)

    def encode_text(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])

    def forward(self, rows: Sequence[Encoded]) -> mx.array:
        ids, mask, types = padded(rows, self.pad_id)
        if self.model_type in _TAKES_TYPES:
            out = self.model(ids, attention_mask=mask, token_type_ids=types)
        else:
            out = self.model(ids, attention_mask=mask)
        if self.pooling is None:
            hidden = out.last_hidden_state
            return hidden if hidden is not None and hidden.ndim == 2 else out.text_embeds
        return pool(out.last_hidden_state, mask, self.pooling)


class _BertClassifier(nn.Module):
    """transformers' BertForSequenceClassification head over mlx-embeddings' BERT."""

    def __init__(self, arch: Any, args: Any, labels: int):
        super().__init__()
        self.bert = arch.Model(args)
        self.classifier = nn.Linear(args.hidden_size, labels)

    def __call__(self, ids: mx.array, mask: mx.array, types: mx.array) -> mx.array:
        out = self.bert(ids, attention_mask=mask, token_type_ids=types)
        return self.classifier(out.pooler_output)


class _RobertaHead(nn.Module):
    def __init__(self, hidden: int, labels: int):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.out_proj = nn.Linear(hidden, labels)

    def __call__(self, first: mx.array) -> mx.array:
        return self.out_proj(mx.tanh(self.dense(first)))


class _RobertaClassifier(nn.Module):
    """transformers' XLMRobertaForSequenceClassification (bge-reranker, ...)."""

    def __init__(self, arch: Any, args: Any, labels: int):
        super().__init__()
        args.add_pooling_layer = False
        self.roberta = arch.Model(args)
        self.classifier = _RobertaHead(args.hidden_size, labels)

    def __call__(self, ids: mx.array, mask: mx.array, types: mx.array) -> mx.array:
        out = self.roberta(ids, attention_mask=mask, token_type_ids=types)
        return self.classifier(out.last_hidden_state[:, 0])


class _ModernBertClassifier(nn.Module):
    """mlx-embeddings' own ModernBertForSequenceClassification, raw logits out."""

    def __init__(self, arch: Any, args: Any, labels: int):
        super().__init__()
        args.architectures = ["ModernBertForSequenceClassification"]
        self.inner = arch.Model(args)

    def __call__(self, ids: mx.array, mask: mx.array, types: mx.array) -> mx.array:
        inner = self.inner
        out = inner.model(ids, attention_mask=mask)
        hidden = out["last_hidden_state"] if isinstance(out, dict) else out[0]
        first = (
            hidden[:, 0] if inner.config.classifier_pooling == "cls" else pool(hidden, mask, "mean")
        )
        return inner.classifier(inner.head(first))

    def sanitize(self, weights: dict[str, mx.array]) -> dict[str, mx.array]:
        return {f"inner.{k}": v for k, v in self.inner.sanitize(weights).items()}


_CLASSIFIERS = {
    "bert": _BertClassifier,
    "xlm_roberta": _RobertaClassifier,
    "roberta": _RobertaClassifier,
    "modernbert": _ModernBertClassifier,
}


def _load_classifier(folder: Path, facts: ModelFacts) -> tuple[nn.Module, int, int]:
    """The classifier, its label count and its token-type rows (a tokenizer's segment ids
    past them would index outside the weights: with one row, they are left out)."""
    from mlx_embeddings.utils import load_config

    config = load_config(folder)
    if "quantization" in config:
        raise ModelUnsupported("quantized cross-encoders are not supported; use the float model")
    build = _CLASSIFIERS.get(facts.model_type)
    if build is None:
        raise ModelUnsupported(f"no cross-encoder head for model type {facts.model_type!r}")
    arch = _architecture(facts.model_type)
    labels = int(config.get("num_labels") or len(config.get("id2label") or {}) or 1)
    args = arch.ModelArgs.from_dict(config)
    model = build(arch, args, labels)
    weights: dict[str, mx.array] = {}
    for file in sorted(glob.glob(str(folder / "model*.safetensors"))):
        weights.update(cast("dict[str, mx.array]", mx.load(file)))
    weights = {k: v for k, v in weights.items() if "position_ids" not in k}
    if hasattr(model, "sanitize"):
        weights = model.sanitize(weights)
    model.load_weights(list(weights.items()))
    mx.eval(model.parameters())
    model.eval()
    return model, labels, int(config.get("type_vocab_size") or 1)


class CrossEncoder(Reranker):
    """A sequence-classification encoder scoring (query, document) pairs."""

    def __init__(self, name: str, folder: Path, facts: ModelFacts):
        self.model, self.labels, self.segments = _load_classifier(folder, facts)
        use_arithmetic_gelu(self.model)
        self.tokenizer = _tokenizer(folder)
        self.name = name
        self.vocab_size = len(self.tokenizer)
        self.max_length = facts.max_length or 512
        self.pad_id = self.tokenizer.pad_token_id or 0

    def encode_text(self, text: str) -> list[int]:
        return list(self.tokenizer(text)["input_ids"])

    def encode_pair(self, query: str, document: str) -> Encoded:
        encoded = self.tokenizer(query, document)
        types = encoded.get("token_type_ids") if self.segments > 1 else None
        return Encoded(list(encoded["input_ids"]), list(types) if types is not None else None)

    def score_batch(self, rows: Sequence[Encoded]) -> mx.array:
        ids, mask, types = padded(rows, self.pad_id)
        logits = self.model(ids, mask, types).astype(mx.float32)
        if self.labels == 1:
            return mx.sigmoid(logits[:, 0])
        return mx.softmax(logits, axis=-1)[:, 1]
