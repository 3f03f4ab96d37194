"""Vision-language models in the continuous batch.

An mlx-vlm model is a vision tower plus a language model. ``LanguageModel`` gives the batch
generator the language model alone, in mlx-lm's shape (``model(tokens, cache=...)`` returns
logits), so text requests and the text of vision requests decode in one batch. A vision
request's images are read once, at admission (``prefill_images``): the tower encodes them,
their features are merged into the prompt's embeddings, and those embeddings are prefilled
into the request's cache up to the end of its last image. The rest of the prompt and every
generated token then go through the batch like any text request's.

Qwen2-VL-style models place image tokens on a 2D grid of rotary positions ("M-RoPE"); the
text after an image continues from the grid's largest position, not from the token count.
Each cache row carries that difference (``shift``) so a batch of rows with different images
(or none) gets each row's own positions.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx_lm.generate import generation_stream
from mlx_lm.models.cache import BatchKVCache, KVCache

from ..protocols import AttentionCache, LayerCache


class ShiftedKVCache(KVCache):
    """A sequence's KV cache whose rotary positions run ``shift`` behind its length."""

    def __init__(self, shift: int = 0):
        super().__init__()
        self.shift = shift

    @classmethod
    def merge(cls, caches):
        return ShiftedBatchKVCache.merge(caches)

    @classmethod
    def from_state(cls, state):
        """A cache read back (the prefix cache on disk); admission sets its shift."""
        cache = cls.__new__(cls)
        cache.state = state
        cache.shift = 0
        return cache


class ShiftedBatchKVCache(BatchKVCache):
    """A batch of shifted caches: one shift per row, kept through filter/extend/extract."""

    def __init__(self, left_padding: list[int]):
        super().__init__(left_padding)
        self.shift = mx.zeros((len(left_padding),), dtype=mx.int32)

    @classmethod
    def merge(cls, caches):
        batch = super().merge(caches)
        if not isinstance(batch, ShiftedBatchKVCache):  # every cache empty
            batch = ShiftedBatchKVCache([0] * len(caches))
        batch.shift = mx.array([getattr(c, "shift", 0) for c in caches], dtype=mx.int32)
        return batch

    def filter(self, batch_indices):
        super().filter(batch_indices)
        indices = mx.array(batch_indices) if isinstance(batch_indices, list) else batch_indices
        self.shift = self.shift[indices]

    def extend(self, other):
        super().extend(other)
        rows = other.offset.shape[0]
        self.shift = mx.concatenate(
            [self.shift, getattr(other, "shift", mx.zeros((rows,), mx.int32))]
        )

    def extract(self, idx):
        plain = super().extract(idx)
        cache = ShiftedKVCache(int(self.shift[idx].item()))
        cache.keys, cache.values, cache.offset = plain.keys, plain.values, plain.offset
        return cache


def set_shift(cache: list[LayerCache], shift: int) -> None:
    for layer in cache:
        if isinstance(layer, ShiftedKVCache):
            layer.shift = shift


@dataclass
class VisionInput:
    """A prompt's images as the model reads them: the processor's arrays, where the last
    image ends, and the prompt as the prefix cache keys it (each image's tokens replaced by
    ids from a hash of its pixels, so two prompts share a cached prefix only where their
    images are the same)."""

    features: dict[str, mx.array]
    image_end: int  # prompt offset just past the last image token
    key: list[int]
    image_tokens: int = 0
    digests: list[str] = field(default_factory=list)
    # the merged embeddings and what goes with them, when encoded ahead of admission in
    # the request's preparing thread (``LanguageModel.encode``); evaluated
    encoded: Encoded | None = None
    # the prompt's KV cache up to ``image_end``, when prefilled ahead of admission in the
    # preparing thread (``LanguageModel.prefill_ahead``)
    prefilled: list[LayerCache] | None = None


@dataclass
class Encoded:
    """A prompt's images read by the tower and merged: the prompt's embeddings, its M-RoPE
    positions and text shift (None, 0 without M-RoPE), and the family's other features
    for the image span (keyword arguments of its language model)."""

    embeds: mx.array
    positions: mx.array | None
    shift: int
    extras: dict[str, Any]


def image_key(
    prompt: list[int], image_token_id: int, digests: list[str], counts: list[int] | None
) -> list[int]:
    """``prompt`` with image-token positions replaced by negative ids (no vocabulary id is
    negative). With ``counts`` (tokens per image, in order) each image's tokens get its own
    digest's id; without, every image token gets the id of all the images' joint digest."""
    positions = [i for i, t in enumerate(prompt) if t == image_token_id]
    if counts is not None and sum(counts) == len(positions):
        owners = [k for k, n in enumerate(counts) for _ in range(n)]
        ids = [_negative_id(digests[k]) for k in owners]
    else:
        joint = _negative_id(hashlib.sha256("".join(digests).encode()).hexdigest())
        ids = [joint] * len(positions)
    key = list(prompt)
    for position, value in zip(positions, ids, strict=True):
        key[position] = value
    return key


def _negative_id(digest: str) -> int:
    return -1 - (int(digest[:8], 16) & 0x7FFFFFFE)


def accepts(fn: Any, name: str) -> bool:
    """Whether ``fn`` takes a keyword ``name`` (by name or through ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


# What mlx-vlm's ``get_input_embeddings`` returns besides the embeddings that the engine
# handles itself: positions (sliced per chunk, M-RoPE) and the text shift after images.
_OWN_FEATURES = ("inputs_embeds", "position_ids", "rope_deltas")


class LanguageModel(nn.Module):
    """An mlx-vlm model's language model in mlx-lm's calling convention.

    Generic over mlx-vlm's families: the language model's own cache layout
    (``make_cache``: sliding-window layers stay rotating), M-RoPE positions for the
    families that have them (``get_rope_index``), and whatever else a family's
    ``get_input_embeddings`` returns for the image span (Qwen3-VL's deepstack features and
    their mask) handed to the language model as mlx-vlm's own generation does: the whole
    prompt's, each chunk placed by the cache's offset."""

    def __init__(self, vlm: Any):
        super().__init__()
        self.vlm = vlm
        language = vlm.language_model
        self.args = language.args if hasattr(language, "args") else language.config
        # M-RoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): three rotary components; text runs on
        # the diagonal, after an image from the grid's largest position
        self.mrope = hasattr(language, "get_rope_index")
        if self.mrope and not accepts(language.__call__, "position_ids"):
            raise ValueError("its language model takes no explicit M-RoPE positions")

    @property
    def layers(self):
        return self.vlm.language_model.layers

    def make_cache(self) -> list[LayerCache]:
        """M-RoPE rows carry their rotary shift; other families keep their language model's
        own layout (plain, or rotating for sliding-window layers)."""
        if self.mrope:
            return [ShiftedKVCache() for _ in self.layers]
        language = self.vlm.language_model
        if hasattr(language, "make_cache"):
            return language.make_cache()
        return [KVCache() for _ in self.layers]

    def __call__(
        self,
        inputs: mx.array,
        cache: Sequence[AttentionCache] | None = None,
        input_embeddings: mx.array | None = None,
    ) -> mx.array:
        extra: dict[str, Any] = {}
        if self.mrope:
            extra["position_ids"] = self._text_positions(inputs.shape, cache)
        out = self.vlm.language_model(inputs, inputs_embeds=input_embeddings, cache=cache, **extra)
        return out.logits

    @staticmethod
    def _text_positions(shape: tuple[int, ...], cache: Sequence[AttentionCache] | None) -> mx.array:
        batch, length = shape
        first = cache[0] if cache else None
        offset = first.offset if first is not None else 0
        shift = getattr(first, "shift", 0)
        start = mx.array(offset) + mx.array(shift)
        start = mx.broadcast_to(start.reshape(-1, 1) if start.ndim else start, (batch, 1))
        positions = start + mx.arange(length)[None]
        return mx.broadcast_to(positions[None], (3, batch, length))

    def encode(self, prompt: list[int], vision: VisionInput) -> None:
        """Run the vision tower and merge its features into the prompt's embeddings now,
        in the calling thread (a request's preparation, beside the engine's decoding), and
        keep them evaluated on ``vision`` for ``prefill_images``. MLX evaluates arrays
        from any thread when they do not depend on another thread's unevaluated ones: the
        weights are evaluated at load, the pixels are this thread's."""
        with mx.stream(generation_stream):  # mlx-lm's stream (one per thread)
            ids = mx.array([prompt])
            # the processor's attention mask, as mlx-vlm's generation passes it (Gemma 3
            # builds its merge from it)
            mask = mx.ones(ids.shape, dtype=mx.int32)
            features = self.vlm.get_input_embeddings(ids, mask=mask, **vision.features)
            embeds = features.inputs_embeds
            if embeds.shape[1] != len(prompt):
                raise ValueError(
                    f"{type(self.vlm).__module__}: the model expands images itself "
                    f"({embeds.shape[1]} embedding rows for {len(prompt)} tokens); "
                    "only processor-expanded image tokens are served"
                )
            extras = {
                k: v
                for k, v in features.to_dict().items()
                if v is not None
                and k not in _OWN_FEATURES
                and accepts(self.vlm.language_model.__call__, k)
            }
            positions, shift = self._positions(prompt, vision, features)
            mx.eval(embeds, extras, *([positions] if positions is not None else []))
        vision.encoded = Encoded(embeds, positions, shift, extras)

    def _positions(self, prompt: list[int], vision: VisionInput, features: Any):
        """(M-RoPE positions of the whole prompt, the text shift after its images), or
        (None, 0) for a model with plain rotary positions."""
        if not self.mrope:
            return None, 0
        if features is not None and features.position_ids is not None:
            positions, deltas = features.position_ids, features.rope_deltas
        else:
            positions, deltas = self.vlm.language_model.get_rope_index(
                mx.array([prompt]), vision.features.get("image_grid_thw"), None, None
            )
        return positions, int(np.array(deltas).reshape(-1)[0])

    def prefill_ahead(
        self, prompt: list[int], vision: VisionInput, cache: list[LayerCache], step: int
    ):
        """Encode the images and prefill ``prompt[:vision.image_end]`` into ``cache`` (empty)
        now, in the calling thread (a request's preparation), so that admission only
        inserts the request into the batch; kept on ``vision.prefilled``."""
        self.encode(prompt, vision)
        with mx.stream(generation_stream):
            self.prefill_images(prompt, vision, cache, 0, step)
        vision.prefilled = cache

    def prefill_images(
        self,
        prompt: list[int],
        vision: VisionInput,
        cache: list[LayerCache],
        start: int,
        step: int = 256,
    ) -> int:
        """Prefill ``prompt[start:vision.image_end]`` from the merged embeddings into
        ``cache`` (which holds ``prompt[:start]``), encoding the images now unless that was
        done ahead; returns where it ended. The rows' text positions after the images are
        set either way."""
        if start >= vision.image_end:
            set_shift(cache, self._positions(prompt, vision, None)[1])
            return start
        if vision.encoded is None:
            self.encode(prompt, vision)
        encoded = vision.encoded
        assert encoded is not None
        set_shift(cache, encoded.shift)
        ids = mx.array([prompt])
        language = self.vlm.language_model
        for a in range(start, vision.image_end, step):
            b = min(a + step, vision.image_end)
            extra = dict(encoded.extras)  # the whole prompt's; the cache offset places them
            if encoded.positions is not None:
                extra["position_ids"] = encoded.positions[..., a:b]
            language(ids[:, a:b], inputs_embeds=encoded.embeds[:, a:b], cache=cache, **extra)
            mx.eval([c.state for c in cache])
        vision.encoded = None  # the cache holds it now
        return vision.image_end
