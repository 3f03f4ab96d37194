"""Shared by the invariance tests: a request's numbers (each step's logits, its tokens and
their log-probabilities) through the engine's batch source, to compare bit for bit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mlx.core as mx
import numpy as np

from vllm_mlx.engine.sampling import SamplingParams, make_sampler
from vllm_mlx.engine.sources import ModelBatchSource

SAMPLING = {"greedy": {"temperature": 0}, "seeded": {"temperature": 0.9, "seed": 1234}}
# each step's logits, the tokens, cached tokens, each token's log-probabilities
Run = tuple[list[np.ndarray], list[int], int, list[np.ndarray]]


def drain(
    source: ModelBatchSource, out: dict[int, tuple[list[int], list[np.ndarray]]]
) -> list[tuple[list[int], list[np.ndarray]]]:
    """Step ``source`` until every row in ``out`` (by uid) ends, each step's token and
    log-probabilities appended to its row; the rows in insertion order."""
    done: set[int] = set()
    while len(done) < len(out):
        steps, ended = source.step()
        for step in steps:
            out[step.uid][0].append(step.token)
            out[step.uid][1].append(np.array(step.logprobs))
            if step.at_limit:
                done.add(step.uid)
        done.update(ended)
    return list(out.values())


def together(
    source: ModelBatchSource, prompts: list[list[int]], params: dict, max_tokens: int
) -> list[tuple[list[int], list[np.ndarray]]]:
    """Every prompt's (tokens, log-probabilities), all inserted before the first step."""
    out: dict[int, tuple[list[int], list[np.ndarray]]] = {}
    for prompt in prompts:
        uid, _ = source.insert(
            prompt,
            sampler=make_sampler(SamplingParams(**params)),
            processors=[],
            max_tokens=max_tokens,
        )
        out[uid] = ([], [])
    return drain(source, out)


def run(
    source: ModelBatchSource,
    prompts: list[list[int]],
    sampling: dict,
    n: int | Sequence[int] = 6,
    admitted_after: Sequence[int] | None = None,
) -> list[Run]:
    """Each prompt's (step logits, tokens, prompt tokens served from a cache, token
    log-probabilities) for ``n`` tokens (or ``n[i]`` for prompt *i*); prompt *i* is
    inserted after ``admitted_after[i]`` steps of the ones before it (default: all before
    the first step, one batch)."""
    delays = list(admitted_after or [0] * len(prompts))
    limits = list(n) if isinstance(n, Sequence) else [n] * len(prompts)
    runs: dict[int, Run] = {}
    order: list[int] = []
    finished: set[int] = set()
    steps_done = 0

    def insert(prompt: list[int], max_tokens: int) -> None:
        logits: list[np.ndarray] = []

        def record(tokens: Any, row: mx.array, logits: list = logits) -> mx.array:
            logits.append(np.array(row))
            return row

        uid, cached = source.insert(
            prompt,
            sampler=make_sampler(SamplingParams(**sampling)),
            processors=[record],
            max_tokens=max_tokens,
        )
        runs[uid] = (logits, [], cached, [])
        order.append(uid)

    pending = list(zip(delays, prompts, limits, strict=True))
    while pending or len(finished) < len(order):
        while pending and pending[0][0] <= steps_done:
            _, prompt, limit = pending.pop(0)
            insert(prompt, limit)
        if len(finished) == len(order):  # nothing runs: the next one starts now
            steps_done = pending[0][0]
            continue
        steps, ended = source.step()
        steps_done += 1
        for step in steps:
            runs[step.uid][1].append(step.token)
            runs[step.uid][3].append(np.array(step.logprobs))
            finished.update([step.uid] if step.at_limit else [])
        finished.update(ended)
    return [runs[uid] for uid in order]


def assert_same(got: Run, want: Run, what: str) -> None:
    """The same tokens, and the same logits at each token's position (speculative decoding
    may also score a position past the last token it emits), and the same log-probabilities
    reported for each token."""
    assert got[1] == want[1], what
    n = len(got[1])
    assert len(got[0]) >= n and len(want[0]) >= n, what
    assert all(np.array_equal(a, b) for a, b in zip(got[0][:n], want[0][:n], strict=True)), what
    assert all(np.array_equal(a, b) for a, b in zip(got[3], want[3], strict=True)), what
