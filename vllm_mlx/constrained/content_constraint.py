"""The interface every content constraint implements, and the token-prefix bookkeeping.

A content constraint sees the tokens generated since it started (its "content") and masks the
logits for the next one. It is position-based: given any content sequence it syncs to it,
rolling back what was undone (speculative decoding) and consuming what is new, so the mask it
returns always matches exactly that prefix. When the matcher rejects a token the model emitted
anyway (the caller forced it, or state desynchronised), the constraint gives up for the request:
it logs why, records it in ``gave_up`` and passes logits through untouched from then on.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Sequence

import mlx.core as mx
import numpy as np

from .json_guard import JsonLexicalGuard
from .masks import apply_packed, packed_size, unpack

logger = logging.getLogger(__name__)


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two id sequences."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class ContentConstraint(abc.ABC):
    """A per-request token matcher over the content tokens, with give-up reporting."""

    def __init__(self, description: str, eos_ids: Sequence[int], vocab: int) -> None:
        self.description = description
        self.gave_up: str | None = None
        self._eos_ids = frozenset(eos_ids)
        self._vocab = vocab
        self._consumed: list[int] = []
        # Content position of the EOS that ended a complete match; the backend never sees it.
        self._finished_at: int | None = None
        self.guard: JsonLexicalGuard | None = None

    # -- backend hooks -------------------------------------------------------------------
    @abc.abstractmethod
    def _rollback(self, count: int) -> None:
        """Undo the last ``count`` consumed tokens."""

    @abc.abstractmethod
    def _consume(self, token: int) -> str | None:
        """Advance by one token; return why it was rejected, or None when accepted."""

    @abc.abstractmethod
    def _allowed(self) -> np.ndarray:
        """Packed mask (see ``masks``) over the tokenizer's ids for the next token; the
        caller may modify it."""

    @abc.abstractmethod
    def is_complete(self) -> bool:
        """True when the content so far is a complete match (EOS would be accepted)."""

    # -- shared logic --------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        """True once a complete match was ended by an EOS token."""
        return self._finished_at is not None

    def give_up(self, reason: str) -> None:
        """Stop constraining this request, once, and say why."""
        if self.gave_up is None:
            self.gave_up = reason
            logger.warning("constraint %s gave up: %s", self.description, reason)

    def mismatch(self, content: Sequence[int]) -> str | None:
        """Why ``content`` (from the start, on a fresh constraint) is not a complete match;
        None when it is one. A check of finished text: it neither logs nor gives up."""
        for position, token in enumerate(content):
            rejection = self._consume(token)
            if rejection is not None:  # the matcher's first line (its state dump follows)
                return f"token {token} at position {position}: {rejection.splitlines()[0]}"
        return None if self.is_complete() else "the text ends before the grammar does"

    def sync(self, content: Sequence[int]) -> bool:
        """Bring the matcher to exactly ``content``; False when it had to give up."""
        if self.gave_up is not None:
            return False
        keep = common_prefix_length(self._consumed, content)
        if keep < len(self._consumed):
            backend_end = len(self._consumed) if self._finished_at is None else self._finished_at
            if self._finished_at is not None and keep <= self._finished_at:
                self._finished_at = None
            if backend_end > keep:
                self._rollback(backend_end - keep)
            del self._consumed[keep:]
        for token in content[keep:]:
            if self._finished_at is not None:
                self._consumed.append(token)  # past the end (pipelined decoding): ignore
                continue
            if token in self._eos_ids and self.is_complete():
                self._finished_at = len(self._consumed)
                self._consumed.append(token)
                continue
            rejection = self._consume(token)
            if rejection is not None:
                self.give_up(
                    f"token {token} at content position {len(self._consumed)}: {rejection}"
                )
                return False
            self._consumed.append(token)
        return True

    def allowed_bits(self, content: Sequence[int]) -> np.ndarray | None:
        """The packed next-token mask after ``content``, or None once the constraint gave up."""
        if not self.sync(content):
            return None
        if self._finished_at is not None:
            packed = np.zeros(packed_size(self._vocab), dtype=np.uint8)
            for eos in self._eos_ids:
                packed[eos >> 3] |= 1 << (eos & 7)
            return packed
        packed = self._allowed()
        if self.gave_up is not None:
            return None
        if not packed.any():
            self.give_up("matcher allows no token (dead end)")
            return None
        return packed if self.guard is None else self.guard.narrow(content, packed)

    def allowed_mask(self, content: Sequence[int]) -> np.ndarray | None:
        """The boolean next-token mask after ``content`` (None once the constraint gave up)."""
        packed = self.allowed_bits(content)
        return None if packed is None else unpack(packed, self._vocab)

    def apply(self, content: Sequence[int], logits: mx.array) -> mx.array:
        """Mask ``logits`` for the token after ``content``."""
        packed = self.allowed_bits(content)
        return logits if packed is None else apply_packed(logits, packed)
