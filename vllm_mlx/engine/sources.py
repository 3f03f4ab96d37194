"""Token sources: where the engine's next token comes from.

The engine owns decoding, stop handling and cancellation; a source only produces
``(token_id, logprobs)`` pairs. ``ModelTokenSource`` runs mlx-lm; ``ReplayTokenSource``
replays a fixed sequence at no model cost, to measure the server's own per-token cost and to
drive parsers through the real server with a controlled output.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import mlx.core as mx
from mlx_lm.generate import generate_step

from .sampling import LogitsProcessor, Sampler


class TokenSource(Protocol):
    def generate(
        self,
        prompt_tokens: list[int],
        *,
        sampler: Sampler,
        logits_processors: list[LogitsProcessor],
        max_tokens: int,
    ) -> Iterator[tuple[int, mx.array | None]]: ...


class ModelTokenSource:
    def __init__(self, model: Any, prefill_step_size: int = 512):
        self.model = model
        self.prefill_step_size = prefill_step_size

    def generate(self, prompt_tokens, *, sampler, logits_processors, max_tokens):
        return generate_step(
            mx.array(prompt_tokens),
            self.model,
            max_tokens=max_tokens,
            sampler=sampler,
            logits_processors=logits_processors or None,
            prefill_step_size=self.prefill_step_size,
        )


class ReplayTokenSource:
    """Yields ``token_ids`` (then stops) whatever the prompt; no logprobs."""

    def __init__(self, token_ids: list[int]):
        self.token_ids = list(token_ids)

    def generate(self, prompt_tokens, *, sampler, logits_processors, max_tokens):
        for token in self.token_ids[:max_tokens]:
            yield token, None
