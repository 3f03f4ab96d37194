"""A prompt prefilled on its own plain KV cache, its first token read off its last call.

mlx-lm's prompt batch merges a sequence's cache into a ``BatchKVCache`` (a copy of every
cached row, and prompt blocks then take the unfused path: the fused native blocks need a
plain cache's int offset), runs the prompt without its last token, then runs that token as
a decode step of its own before the first token can be sampled. A one-row prefill needs
none of that: when every layer's cache is mlx-lm's plain ``KVCache`` the prompt runs on it
as it is (a prefix-cache hit's views, written copy-on-write), the last call carries the
final token too and its last position's logits give the first token, and the cache joins
the generation batch as a one-row ``BatchKVCache`` over the same arrays (no copy).

A one-row generation batch hands a finished sequence's cache over the same way, as plain
caches over its arrays, where mlx-lm copies the row out.

Numbers do not change with this: every prompt of such a cache, cold or cached, runs this
way, and a row's logits depend neither on its block nor on its neighbours (the native
path's invariant).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx_lm.generate import GenerationBatch, PromptProcessingBatch
from mlx_lm.models import llama, qwen2, qwen3
from mlx_lm.models.cache import BatchKVCache, KVCache

from ..protocols import LayerCache

# Models whose call is their decoder's hidden states through the output head, nothing else
# (read in mlx-lm): the prompt's last call can run the head over its final position only.
_HEAD_OVER_HIDDEN = (llama.Model, qwen2.Model, qwen3.Model)


def plain(cache: list[Any] | None) -> bool:
    """Whether every layer's cache is exactly mlx-lm's ``KVCache`` (the one-row path)."""
    return cache is not None and len(cache) > 0 and all(type(c) is KVCache for c in cache)


def last_logits(batch: PromptProcessingBatch, tokens: list[int]) -> mx.array:
    """Run ``tokens`` (ending with the prompt's final token) on a one-row prompt batch whose
    ``prompt_cache`` is plain; the logits of the final position, ``[1, 1, vocab]``. The
    batch's tokens gain all but the final one, which the first decode step records."""
    batch.tokens[0] += tokens[:-1]
    logits = _final_logits(batch.model, mx.array([tokens]), batch.prompt_cache)
    mx.eval(logits, [c.state for c in batch.prompt_cache])
    return logits


def _final_logits(model: Any, inputs: mx.array, cache: list[Any]) -> mx.array:
    """The final position's logits; where the model is a plain decoder and head, the head
    runs over that position alone (the others' logits are never read; a row's logits are
    the same bits in any number of rows, so this changes no number)."""
    if type(model) not in _HEAD_OVER_HIDDEN:
        return model(inputs, cache=cache)[:, -1:, :]
    hidden = model.model(inputs, cache)[:, -1:, :]
    if model.args.tie_word_embeddings:
        return model.model.embed_tokens.as_linear(hidden)
    return model.lm_head(hidden)


def reserve(cache: list[KVCache], ahead: int) -> None:
    """Room in each layer's buffers for ``ahead`` more positions, allocated once: mlx-lm's
    cache grows by 256 positions, copying every row each time and holding the old and new
    buffers while the call that grows it runs, so a long prompt would copy its cache once
    per 256 tokens. The size is the next multiple of the cache's step past the positions
    (the first decoded token's room too), what growing would reach; the rows are the same
    values, so no number changes. A layer with no buffer yet is left to its first call."""
    for c in cache:
        if c.keys is None or c.values is None:
            continue
        if c.keys.shape[2] >= c.offset + ahead:
            continue
        size = (c.offset + ahead) // c.step * c.step + c.step
        keys = mx.zeros((*c.keys.shape[:2], size, c.keys.shape[3]), c.keys.dtype)
        values = mx.zeros((*c.values.shape[:2], size, c.values.shape[3]), c.values.dtype)
        keys[..., : c.offset, :] = c.keys[..., : c.offset, :]
        values[..., : c.offset, :] = c.values[..., : c.offset, :]
        c.keys, c.values = keys, values


def held_rows(cache: list[KVCache]) -> list[LayerCache]:
    """A plain cache's rows as new cache objects over its arrays (for the prefix cache;
    MLX writes into a shared buffer by copying, so later writes never reach them)."""
    held: list[LayerCache] = []
    for c in cache:
        copy = KVCache()
        if c.keys is not None:
            copy.keys, copy.values = c.keys[..., : c.offset, :], c.values[..., : c.offset, :]
            copy.offset = c.offset
        held.append(copy)
    return held


def one_row_batch(cache: list[KVCache]) -> list[BatchKVCache]:
    """A plain cache as a one-row ``BatchKVCache`` per layer over the same arrays; the plain
    objects give theirs up (a buffer two objects hold cannot be written in place)."""
    batched = []
    for c in cache:
        b = BatchKVCache([0])
        if c.keys is not None:
            b.keys, b.values = c.keys, c.values
            b.offset = mx.array([c.offset], dtype=mx.int32)
            b._idx = c.offset
        c.keys = c.values = None
        batched.append(b)
    return batched


class LeanGenerationBatch(GenerationBatch):
    """mlx-lm's generation batch without two pieces of work nobody reads.

    A step whose tokens are every row's last (``max_tokens``) runs no forward for the
    tokens after them: mlx-lm's step computes the next token's logits ahead, and the
    finished rows' caches, stored at once, would wait for that forward (a request of one
    token, a prefill, waited a whole decode step for its first token). The rows then end
    holding the tokens their cache holds: all but the last emitted one, whose keys nothing
    computed. And a one-row batch's cache comes out without a copy: the batch's arrays as
    plain caches (then the batch drops them, or a later write into them copies first, as
    MLX does for any shared buffer)."""

    def _step(self) -> tuple[list[int], list[mx.array]]:
        if not self.uids or any(
            n + 1 < limit for n, limit in zip(self._num_tokens, self.max_tokens, strict=True)
        ):
            return super()._step()
        tokens: mx.array = self._next_tokens
        self._current_tokens = tokens  # type: ignore[assignment]  # mlx-lm's starts as None
        self._current_logprobs = self._next_logprobs
        mx.eval(tokens, self._current_logprobs)
        emitted: list[int] = tokens.tolist()  # type: ignore[assignment]  # a 1-d array's
        return emitted, self._current_logprobs

    def extract_cache(self, idx: int) -> list[LayerCache]:
        layers = self.prompt_cache
        if len(self.uids) != 1 or not all(
            type(c) is BatchKVCache and c.keys is not None for c in layers
        ):
            return super().extract_cache(idx)
        if any(c.left_padding.tolist() != [0] for c in layers):
            return super().extract_cache(idx)
        rows: list[LayerCache] = []
        for c in layers:
            plain_row = KVCache()
            plain_row.keys, plain_row.values, plain_row.offset = c.keys, c.values, c._idx
            rows.append(plain_row)
        return rows


class _Replayed:
    """A model whose one call returns logits already computed (the first decode step of a
    row whose prompt's last call produced them), so mlx-lm's own step processes and samples
    them exactly as it would its model's."""

    def __init__(self, logits: mx.array):
        self.logits = logits

    def __call__(self, inputs: mx.array, cache: Any = None) -> mx.array:
        return self.logits


def started_generation(
    batch: PromptProcessingBatch, final_token: int, logits: mx.array
) -> GenerationBatch:
    """A one-row prompt batch whose prompt has run (``last_logits``) as a generation batch
    whose first token is sampled from ``logits`` (pending, as after mlx-lm's first step)."""
    replayed: Any = _Replayed(logits)  # called as the model, once
    generation = GenerationBatch(
        replayed,
        batch.uids,
        mx.array([final_token]),
        one_row_batch(batch.prompt_cache),
        batch.tokens,
        batch.samplers,
        batch.fallback_sampler,
        batch.logits_processors,
        batch.stop_sequences,
        batch.max_tokens,
    )
    generation.model = batch.model
    batch.uids, batch.prompt_cache, batch.tokens = [], [], []
    batch.samplers, batch.logits_processors, batch.max_tokens = [], [], []
    return generation
