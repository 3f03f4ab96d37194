"""One function from a model folder to the embedder or reranker that serves it."""

from __future__ import annotations

from pathlib import Path

from .decoders import DecoderEmbedder, YesNoReranker
from .encoders import CrossEncoder, EncoderEmbedder, ModelUnsupported
from .kinds import ENCODER_TYPES, ModelFacts
from .service import Embedder, Reranker


def load_embedding_model(name: str, folder: Path, facts: ModelFacts) -> Embedder | Reranker:
    """Load ``folder`` as ``facts.kind`` says. A decoder embedder mlx-embeddings has no
    class for (gte-Qwen2, ...) loads through mlx-lm and is pooled as it declares."""
    if facts.kind == "cross_encoder":
        return CrossEncoder(name, folder, facts)
    if facts.kind == "yes_no_reranker":
        return YesNoReranker(name, folder, facts.max_length, facts.score_tokens)
    try:
        return EncoderEmbedder(name, folder, facts)
    except ModelUnsupported:
        if facts.model_type in ENCODER_TYPES:
            raise
    from mlx_lm.utils import load

    model, tokenizer = load(str(folder))[:2]
    vocab = int(getattr(model.args, "vocab_size", 0)) or len(tokenizer.get_vocab())
    return DecoderEmbedder(
        name,
        model,
        tokenizer,
        vocab_size=vocab,
        max_length=facts.max_length or 8192,
        pooling=facts.pooling,
    )
