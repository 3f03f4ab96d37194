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
import copy
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import replace
from typing import Any

from ...pipeline import ChatEvent, ChatResult, Pipeline, Prepared, Usage
from ...request import SEED_LIMIT, Sampling
from ..errors import APIError
from ..ops.keepalive import OPENAI_KEEPALIVE
from ..sse import sse_data
from ..streaming import event_frames, generation_failed
from .stream import DONE

# one choice's chunk for an event (None: nothing to send)
PieceOf = Callable[[ChatEvent], "dict[str, Any] | None"]

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


async def streamed_choices(
    pairs: list[tuple[Prepared, AsyncGenerator[ChatEvent, None]]],
    piece_of: Callable[[int], PieceOf],
    usage_chunk: Callable[[Usage], dict] | None,
    opening: dict | None = None,
) -> AsyncIterator[str]:
    """The n choices' frames: ``opening`` (a chunk) for each, then each choice's chunks
    (``piece_of(index)`` makes one choice's, so it may keep state of its own) tagged with
    its index as they come, the usage summed (``usage_chunk``, when asked for) and [DONE]."""
    usages: dict[int, Usage] = {}

    def choice_frames(index: int, events: AsyncGenerator[ChatEvent, None]) -> AsyncIterator[str]:
        piece = piece_of(index)

        def on_event(event: ChatEvent) -> list[str]:
            out = piece(event)
            return [sse_data(with_index(out, index))] if out is not None else []

        def on_finish(event: ChatEvent) -> list[str]:
            usages[index] = event.usage or Usage()
            return []

        return event_frames(events, OPENAI_KEEPALIVE, on_event, on_finish)

    if opening is not None:
        for index in range(len(pairs)):
            yield sse_data(with_index(copy.deepcopy(opening), index))
    choices = [choice_frames(i, events) for i, (_, events) in enumerate(pairs)]
    async for frame in interleaved(choices):
        yield frame
    if usage_chunk is not None:
        yield sse_data(usage_chunk(usage_of([usages[i] for i in sorted(usages)])))
    yield DONE


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
