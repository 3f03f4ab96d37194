"""``n`` > 1: several choices for one prompt, each its own sequence in the batch.

The n sequences are admitted together, so the engine prefills the prompt once when it is
long enough to share (``engine.sources.SHARED_PREFILL_MIN`` tokens): the others wait for
that prefill and start from the prefix cache. With a ``seed``, choice ``i`` samples with
``seed + i``, so the n choices differ and each is reproducible. Usage counts the prompt
once and the completions of every choice. Served on non-streamed requests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace

from ...pipeline import ChatResult, Pipeline, Prepared, Usage
from ...request import SEED_LIMIT, Sampling
from ..errors import APIError
from ..streaming import generation_failed

MAX_CHOICES = 16


def check_n(n: int, stream: bool) -> None:
    if n > MAX_CHOICES:
        raise APIError(400, f"n must be at most {MAX_CHOICES}", param="n")
    if n > 1 and stream:
        raise APIError(400, "n > 1 is served on non-streamed requests", param="n")


def seeded(sampling: Sampling, index: int) -> Sampling:
    """Choice ``index``'s sampling: the request's seed moved by ``index``."""
    if sampling.seed is None or index == 0:
        return sampling
    return replace(sampling, seed=(sampling.seed + index) % SEED_LIMIT)


async def all_choices(
    pipeline: Pipeline, first: Prepared, prepare: Callable[[int], Prepared], n: int
) -> list[ChatResult]:
    """Every choice's result: ``first`` and ``prepare(i)`` for the others (prepared off the
    event loop), generated side by side."""
    rest = [await asyncio.to_thread(prepare, i) for i in range(1, n)]
    prepared = [first, *rest]
    # admitted back to back, while the first prefill runs, so the others wait to share it
    streams = [pipeline.stream(p) for p in prepared]
    runs: list[Awaitable[ChatResult]] = [
        pipeline.result_of(p, s) for p, s in zip(prepared, streams, strict=True)
    ]
    results = list(await asyncio.gather(*runs))
    for result in results:
        if result.finish_reason == "error":
            raise generation_failed(result.error)
    return results


def usage_of(results: list[ChatResult]) -> Usage:
    """The prompt once, every choice's completion."""
    first = results[0].usage
    return Usage(
        first.prompt_tokens,
        sum(r.usage.completion_tokens for r in results),
        first.cached_tokens,
        sum(r.usage.reasoning_tokens for r in results),
    )
