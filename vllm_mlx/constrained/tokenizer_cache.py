"""Per-tokenizer enforcement data, built once and shared by every request.

Both backends need an expensive view of the vocabulary (0.3-0.7 s on 49k tokens). It is cached
per tokenizer object with weak keys, so a tokenizer that is dropped frees its data and a new
tokenizer that happens to reuse a memory address never sees stale data (no ``id()`` keys).
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from ..protocols import Tokenizer

T = TypeVar("T")

_lock = threading.Lock()
_caches: dict[str, weakref.WeakKeyDictionary[Any, Any]] = {}


def hf_tokenizer(tokenizer: Tokenizer) -> Any:
    """The Hugging Face tokenizer inside an mlx-lm ``TokenizerWrapper`` (or the object itself)."""
    return getattr(tokenizer, "_tokenizer", tokenizer)


def per_tokenizer(name: str) -> Callable[[Callable[[Any], T]], Callable[[Any], T]]:
    """Cache ``build(tokenizer)`` per Hugging Face tokenizer object, weakly keyed."""

    def decorate(build: Callable[[Any], T]) -> Callable[[Any], T]:
        cache: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        _caches[name] = cache

        @functools.wraps(build)
        def cached(tokenizer: Tokenizer) -> T:
            key = hf_tokenizer(tokenizer)
            with _lock:
                if key in cache:
                    return cache[key]
            value = build(tokenizer)  # built outside the lock: other tokenizers need not wait
            with _lock:
                return cache.setdefault(key, value)

        return cached

    return decorate


def eos_token_ids(tokenizer: Tokenizer) -> list[int]:
    """All ids that end generation, sorted (the wrapper's set plus the HF tokenizer's EOS)."""
    ids = set(getattr(tokenizer, "eos_token_ids", None) or ())
    eos = getattr(hf_tokenizer(tokenizer), "eos_token_id", None)
    if eos is not None:
        ids.add(eos)
    return sorted(ids)


def token_count(tokenizer: Tokenizer) -> int:
    """Number of ids the tokenizer can produce, added tokens included."""
    return len(hf_tokenizer(tokenizer))


@per_tokenizer("special_ids")
def special_token_ids(tokenizer: Tokenizer) -> frozenset[int]:
    """Ids of special/added control tokens (never part of constrained text)."""
    hf = hf_tokenizer(tokenizer)
    ids = set(getattr(hf, "all_special_ids", ()) or ())
    for token_id, added in getattr(hf, "added_tokens_decoder", {}).items():
        if getattr(added, "special", False):
            ids.add(token_id)
    return frozenset(ids)


@per_tokenizer("token_texts")
def token_texts(tokenizer: Tokenizer) -> list[str]:
    """Decoded text of each token on its own ('' for special tokens)."""
    hf = hf_tokenizer(tokenizer)
    specials = special_token_ids(tokenizer)
    texts = hf.batch_decode([[i] for i in range(token_count(tokenizer))])
    return ["" if i in specials else t for i, t in enumerate(texts)]
