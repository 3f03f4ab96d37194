"""Pipeline parallelism for Llama-architecture models, which mlx-lm shards only by tensor.

Same contract as mlx-lm's ``PipelineMixin`` (models/pipeline.py) so both look alike to the
rest of the server: rank r keeps the layers ``pipeline_split`` gives it (rank 0 the last
ones), receives the hidden state from rank r+1, sends its output to rank r-1, and the final
hidden state is all-gathered so every rank computes the same logits. Layers a rank does not
run are dropped before the weights are evaluated, so each rank holds only its share.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mlx.core as mx
from mlx_lm.models import llama
from mlx_lm.models.base import create_attention_mask

from ..protocols import AttentionCache
from .group import pipeline_split


class PipelinedLlamaModel(llama.LlamaModel):
    """``LlamaModel`` running only this rank's layers (``cache`` holds one entry per local
    layer)."""

    pipeline_rank = 0
    pipeline_size = 1
    group: Any = None

    def __call__(
        self,
        inputs: mx.array,
        cache: Sequence[AttentionCache | None] | None = None,
        input_embeddings: mx.array | None = None,
    ) -> mx.array:
        h = input_embeddings if input_embeddings is not None else self.embed_tokens(inputs)
        rank, size, group = self.pipeline_rank, self.pipeline_size, self.group
        if cache is None:
            cache = [None] * len(self.layers)
        mask = create_attention_mask(h, cache[0])
        if rank < size - 1:
            h = mx.distributed.recv_like(h, rank + 1, group=group)
        for layer, c in zip(self.layers, cache, strict=True):
            h = layer(h, mask, cache=c)
        if rank != 0:
            h = mx.distributed.send(h, rank - 1, group=group)
            if cache[-1] is not None:
                # the send must run even though only the cache depends on this stage
                cache[-1].keys = mx.depends(cache[-1].keys, h)
        if size > 1:
            h = mx.distributed.all_gather(h, group=group)[: h.shape[0]]
        return self.norm(h)


def pipeline_llama(model: Any, group: Any) -> None:
    """Keep this rank's layers of a (lazily loaded) mlx-lm Llama ``model``."""
    inner = model.model
    if any(layer.use_sliding for layer in inner.layers):
        raise ValueError("pipeline parallelism does not support sliding-window Llama layers")
    rank, size = group.rank(), group.size()
    if len(inner.layers) < size:
        raise ValueError(f"{len(inner.layers)} layers cannot be split over {size} ranks")
    start, end = pipeline_split(len(inner.layers), size)[rank]
    inner.__class__ = PipelinedLlamaModel
    inner.layers = inner.layers[start:end]
    inner.pipeline_rank, inner.pipeline_size, inner.group = rank, size, group
    inner.fa_idx = 0
