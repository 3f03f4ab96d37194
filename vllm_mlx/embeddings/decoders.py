"""Decoder models as embedders and rerankers: a chat model's final hidden state pooled (mean
over the tokens, or the last token, as llama.cpp's ``--pooling`` and vLLM's pooling runner
allow), and Qwen3-Reranker-style models that score a document by the odds of "yes" over
"no" as the next token.

Inputs are right-padded: under causal attention no real token sees the padding after it,
and positions start at 0 for every row, so a batch computes what each input alone does.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import mlx.core as mx

from ..protocols import Tokenizer
from .kinds import Pooling
from .service import Embedder, EmbeddingError, Encoded, Reranker, hidden_width, padded, pool


def final_hidden(model: Any, ids: mx.array) -> mx.array:
    """The normed final hidden states ``[rows, length, width]`` of an mlx-lm model (its
    inner ``model``, which every mlx-lm language model has; the head is not applied)."""
    inner = getattr(model, "model", None)
    if inner is None or not callable(inner):
        raise EmbeddingError("this model exposes no hidden states to pool")
    return inner(ids)


class DecoderEmbedder(Embedder):
    """A loaded chat model's hidden states, pooled (``mean`` by default)."""

    def __init__(
        self,
        name: str,
        model: Any,
        tokenizer: Tokenizer,
        *,
        vocab_size: int,
        max_length: int,
        pooling: Pooling = "mean",
    ):
        self.name = name
        self.model = model
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.max_length = max_length
        self.pooling = pooling
        self.dimensions = hidden_width(model)
        self.pad_id = 0

    def encode_text(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text))

    def forward(self, rows: Sequence[Encoded]) -> mx.array:
        ids, mask, _ = padded(rows, self.pad_id)
        pooling = self.pooling or "mean"
        return pool(final_hidden(self.model, ids).astype(mx.float32), mask, pooling)


# Qwen3-Reranker's documented prompt (its model card): a system turn that asks for "yes" or
# "no", the instruction, query and document in the user turn, an empty thinking block.
_SYSTEM = (
    "Judge whether the Document meets the requirements based on the Query and the Instruct "
    'provided. Note that the answer can only be "yes" or "no".'
)
DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
_PREFIX = f"<|im_start|>system\n{_SYSTEM}<|im_end|>\n<|im_start|>user\n"
_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


class YesNoReranker(Reranker):
    """A decoder scoring P("yes") against P("no") after the reranking prompt."""

    def __init__(self, name: str, folder: Path, max_length: int | None, tokens: tuple[str, str]):
        from mlx_lm.utils import load

        self.model, self.tokenizer = load(str(folder))[:2]
        self.name = name
        self.vocab_size = int(getattr(self.model.args, "vocab_size", 0)) or len(
            self.tokenizer.get_vocab()
        )
        self.max_length = max_length or 8192
        self.pad_id = 0
        ids = [self.tokenizer.encode(t, add_special_tokens=False) for t in tokens]
        if any(len(i) != 1 for i in ids):
            raise EmbeddingError(f"the tokenizer has no single tokens {tokens!r} to score with")
        self.no_id, self.yes_id = ids[0][0], ids[1][0]

    def encode_text(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def encode_pair(self, query: str, document: str) -> Encoded:
        body = f"<Instruct>: {DEFAULT_INSTRUCTION}\n<Query>: {query}\n<Document>: {document}"
        return Encoded(self.encode_text(_PREFIX + body + _SUFFIX))

    def score_batch(self, rows: Sequence[Encoded]) -> mx.array:
        ids, mask, _ = padded(rows, self.pad_id)
        last = pool(final_hidden(self.model, ids), mask, "last")
        logits = _head(self.model, last).astype(mx.float32)
        pair = mx.stack([logits[:, self.no_id], logits[:, self.yes_id]], axis=-1)
        return mx.softmax(pair, axis=-1)[:, 1]


def _head(model: Any, hidden: mx.array) -> mx.array:
    """The language-model head on pooled rows (tied embeddings when there is no head)."""
    head = getattr(model, "lm_head", None)
    if head is not None:
        return head(hidden)
    return model.model.embed_tokens.as_linear(hidden)
