"""The protocol types every layer shares (a logits processor, tokenizers, a layer's cache),
defined once: the bottom layer, beside ``families``, importing nothing of vllm_mlx."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import mlx.core as mx

# mlx-lm's logits processor: (the tokens so far, this step's logits) -> the logits to sample
# from. The penalties, the constraint chain and the thinking-aware phase machine are these.
LogitsProcessor = Callable[[mx.array, mx.array], mx.array]


class Tokenizer(Protocol):
    """What the server asks of a tokenizer: mlx-lm's ``TokenizerWrapper`` (which forwards
    to the Hugging Face tokenizer it wraps) or that tokenizer itself. What only some
    tokenizers have (``eos_token_ids``, ``detokenizer``, ``get_added_vocab``…) is read
    with ``getattr``."""

    eos_token_id: Any
    chat_template: Any

    def encode(self, text: str, *args: Any, **kwargs: Any) -> list[int]: ...

    def decode(self, token_ids: Any, *args: Any, **kwargs: Any) -> str: ...

    def get_vocab(self) -> dict[str, int]: ...

    def convert_tokens_to_ids(self, tokens: Any) -> Any: ...


class DecodingTokenizer(Tokenizer, Protocol):
    """A tokenizer the engine decodes with: mlx-lm's ``TokenizerWrapper``, whose streaming
    detokenizer and set of end-of-sequence ids a bare Hugging Face tokenizer lacks."""

    detokenizer: Any
    eos_token_ids: Any


class SizedTokenizer(Tokenizer, Protocol):
    """A Hugging Face tokenizer, whose length counts its ids (added tokens included)."""

    def __len__(self) -> int: ...


class LayerCache(Protocol):
    """One layer's cache, as mlx-lm's cache classes (``mlx_lm.models.cache``: plain,
    quantized, rotating, arrays) keep it: what the prefix cache copies, measures, saves and
    rebuilds. A prompt cache is a ``list[LayerCache]``, one a layer."""

    @property
    def state(self) -> Any:
        """The layer's arrays (a tree of them): setting it makes the same cache over others."""

    @state.setter
    def state(self, value: Any) -> None: ...

    @property
    def nbytes(self) -> int: ...


class AttentionCache(LayerCache, Protocol):
    """A layer cache that attention writes each step's keys and values into: mlx-lm's KV
    caches (plain, batched, quantized, rotating), not a recurrent layer's ``ArraysCache``.
    ``offset`` counts the tokens it holds: an int, or a batched cache's int32 ``[B]``;
    ``keys`` and ``values`` are its arrays (None before the first write; a quantized
    cache's are (data, scales, biases) triples)."""

    offset: Any
    keys: Any
    values: Any

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> Any:
        """Appends this step's keys and values; returns all the layer attends over (a
        quantized cache's as (data, scales, biases) triples)."""
