"""``n`` > 1: several choices for one prompt, each its own sequence in the batch.

The n sequences are admitted together, so the engine prefills the prompt once when it is
long enough to share (``engine.sources.SHARED_PREFILL_MIN`` tokens): the others wait for
that prefill and start from the prefix cache. With a ``seed``, choice ``i`` samples with
``seed + i``, so the n choices differ and each is reproducible. Usage counts the prompt
once and the completions of every choice. Streamed, each choice's chunks carry its
``index`` and the choices' chunks interleave as they are generated.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import replace

from ...pipeline import ChatEvent, ChatResult, Pipeline, Prepared, Usage
from ...request import SEED_LIMIT, Sampling
from ..errors import APIError
from ..streaming import generation_failed

MAX_CHOICES = 16


def check_n(n: int) -> None:
    if n > MAX_CHOICES:
        raise APIError(400, f"n must be at most {MAX_CHOICES}", param="n")


def seeded(sampling: Sampling, index: int) -> Sampling:
    """Choice ``index``'s sampling: the request's seed moved by ``index``."""
    if sampling.seed is None or index == 0:
        return sampling
    return replace(sampling, seed=(sampling.seed + index) % SEED_LIMIT)


async def admitted(
    pipeline: Pipeline, first: Prepared, prepare: Callable[[int], Prepared], n: int
) -> list[tuple[Prepared, AsyncGenerator[ChatEvent, None]]]:
    """Every choice prepared (``first``, then ``prepare(i)`` off the event loop) and its
    events, the n admitted back to back while the first prefill runs, so the others wait
    to share it."""
    rest = [await asyncio.to_thread(prepare, i) for i in range(1, n)]
    prepared = [first, *rest]
    return [(p, pipeline.stream(p)) for p in prepared]


async def all_choices(
    pipeline: Pipeline, first: Prepared, prepare: Callable[[int], Prepared], n: int
) -> list[ChatResult]:
    """Every choice's result, generated side by side."""
    runs = [pipeline.result_of(p, s) for p, s in await admitted(pipeline, first, prepare, n)]
    results = list(await asyncio.gather(*runs))
    for result in results:
        if result.finish_reason == "error":
            raise generation_failed(result.error)
    return results


async def interleaved(choices: list[AsyncIterator[str]]) -> AsyncIterator[str]:
    """Each choice's frames as they come; the first failure ends them all (raised)."""
    frames: asyncio.Queue[str | BaseException | None] = asyncio.Queue()

    async def pump(choice: AsyncIterator[str]) -> None:
        try:
            async for frame in choice:
                await frames.put(frame)
            await frames.put(None)
        except Exception as exc:  # handed to the consumer, which raises it
            await frames.put(exc)

    tasks = [asyncio.ensure_future(pump(choice)) for choice in choices]
    try:
        running = len(tasks)
        while running:
            item = await frames.get()
            if item is None:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()


def with_index(chunk: dict, index: int) -> dict:
    for choice in chunk.get("choices", []):
        choice["index"] = index
    return chunk


def usage_of(usages: list[Usage]) -> Usage:
    """The prompt once, every choice's completion."""
    first = usages[0] if usages else Usage()
    return Usage(
        first.prompt_tokens,
        sum(u.completion_tokens for u in usages),
        first.cached_tokens,
        sum(u.reasoning_tokens for u in usages),
    )
