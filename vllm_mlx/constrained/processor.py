"""The mlx-lm logits processor that applies one content constraint to everything generated."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from .content_constraint import ContentConstraint
from .masks import ban_bias


def generated_ids(tokens: mx.array, prompt_length: int) -> list[int]:
    """Ids generated after the first ``prompt_length`` ids of mlx-lm's token history.

    Read through numpy's view of the buffer: slicing in MLX first builds and evaluates a
    graph, which cost ≈2-3x more per token.
    """
    return np.asarray(tokens).reshape(-1)[prompt_length:].tolist()


class ConstrainedLogitsProcessor:
    """``processor(tokens, logits) -> logits`` for a request whose whole output is constrained.

    mlx-lm's first call sees only the prompt (or its uncached suffix), so that length marks
    where generated content starts; later calls may see a shorter history after a rollback,
    which the constraint handles by position.
    """

    def __init__(self, constraint: ContentConstraint) -> None:
        self.constraint = constraint
        self._prompt_length: int | None = None

    @property
    def gave_up(self) -> str | None:
        """Why constraining stopped for this request, or None while it is enforced."""
        return self.constraint.gave_up

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        if self._prompt_length is None:
            self._prompt_length = tokens.size
        if self.constraint.gave_up is not None:
            return logits
        return self.constraint.apply(generated_ids(tokens, self._prompt_length), logits)


class BannedTokensProcessor:
    """``processor(tokens, logits) -> logits`` that never lets ``ids`` be sampled
    (``tool_choice: "none"``: the family's call opener, when it is one special token)."""

    gave_up: str | None = None

    def __init__(self, ids: list[int]) -> None:
        self.ids = list(ids)
        self._bias: dict[tuple[int, mx.Dtype], mx.array] = {}

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        key = (logits.shape[-1], logits.dtype)
        if key not in self._bias:
            self._bias[key] = ban_bias(self.ids, *key)
        return logits + self._bias[key]
