"""Several sequences in one fused decode step (``native/decode.py`` over mlx-lm's batch)
each get their solo run's bits: the same logits at every step and the same tokens, with
prompts of different lengths, each its own sampler (greedy, seeded with filters), and
sequences joining and leaving the batch mid-way; on the default int16 products and on
float32 and float16 KV caches."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import make_prompt_cache
from test_decode import count_calls
from test_patch import quantized_llama

from vllm_mlx import native
from vllm_mlx.engine.sampling import SamplingParams, make_sampler
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.native import patch

pytestmark = [
    pytest.mark.default_activations,  # the int16 products a server runs
    pytest.mark.skipif(not native.available(), reason="vllm_mlx.native is not built"),
]
STEPS = 10
# (prompt length, sampling): each sequence its own length and sampler
SEQUENCES = [
    (11, {"temperature": 0}),
    (23, {"temperature": 0.8, "seed": 7}),
    (5, {"temperature": 1.2, "seed": 11, "top_k": 20}),
    (17, {"temperature": 0.7, "seed": 3, "top_p": 0.9, "min_p": 0.05}),
    (30, {"temperature": 0}),
]
Run = tuple[list[np.ndarray], list[int]]  # each step's logits, the tokens


def prompt(i: int) -> list[int]:
    length = SEQUENCES[i][0]
    return [(13 * j + 29 * i) % 250 + 1 for j in range(length)]


def insert(source: ModelBatchSource, i: int, runs: dict[int, Run]) -> int:
    logits: list[np.ndarray] = []

    def record(tokens: Any, row: mx.array) -> mx.array:
        logits.append(np.array(row))
        return row

    sampler = make_sampler(SamplingParams(**SEQUENCES[i][1]))
    uid, _ = source.insert(prompt(i), sampler=sampler, processors=[record], max_tokens=STEPS)
    runs[uid] = (logits, [])
    return uid


def step(source: ModelBatchSource, runs: dict[int, Run]) -> set[int]:
    """One step; the uids that reached their limit."""
    done = set()
    steps, _ = source.step()
    for s in steps:
        runs[s.uid][1].append(s.token)
        if s.at_limit:
            done.add(s.uid)
    return done


def solo(model: Any, i: int) -> Run:
    source = ModelBatchSource(model, max_num_seqs=8)
    runs: dict[int, Run] = {}
    uid = insert(source, i, runs)
    while not step(source, runs):
        pass
    return runs[uid]


def assert_same(got: Run, want: Run, what: str) -> None:
    n = len(got[1])
    assert got[1] == want[1][:n], what
    assert len(got[0]) >= n and len(want[0]) >= n, what
    assert all(np.array_equal(a, b) for a, b in zip(got[0][:n], want[0][:n], strict=True)), what


def test_each_sequence_of_a_changing_batch_gets_its_solo_bits(
    monkeypatch: pytest.MonkeyPatch, kv: bool
) -> None:
    model = quantized_llama(4, 32, seed=5)
    assert patch.enable(model).decode_stacks == 1
    want = [solo(model, i) for i in range(len(SEQUENCES))]
    calls = count_calls(monkeypatch)
    source = ModelBatchSource(model, max_num_seqs=8)
    runs: dict[int, Run] = {}
    uids = {i: insert(source, i, runs) for i in (0, 1, 2)}
    finished: set[int] = set()
    for n in range(3 * STEPS):
        if n == 3:  # joins while the others decode
            uids[3] = insert(source, 3, runs)
        if n == 5:  # leaves before its limit
            source.remove(uids[1])
            finished.add(uids[1])
        if n == 6:
            uids[4] = insert(source, 4, runs)
        finished |= step(source, runs)
        if len(finished) == len(uids) == len(SEQUENCES):
            break
    assert len(finished) == len(SEQUENCES)
    for i, uid in uids.items():
        got = runs[uid]
        assert len(got[1]) == STEPS if i != 1 else 0 < len(got[1]) < STEPS, i
        assert_same(got, want[i], f"sequence {i}")
    assert max(calls) >= 3  # the batched steps ran in the fused node, several rows at once


@pytest.mark.parametrize("rows", [2, 3, 4, 5, 8])
def test_a_decode_row_is_the_same_in_any_batch(rows: int) -> None:
    """The stack's rows of a batch of any size equal each row's one-row step, bit for bit
    (the products read each weight once for up to four rows)."""
    model = quantized_llama(4, 32, seed=rows)
    patch.enable(model)
    mx.random.seed(rows)
    tokens = mx.random.randint(1, 250, (rows, 9))
    batch_cache = make_prompt_cache(model)
    model(tokens[:, :-1], cache=batch_cache)
    batch = model(tokens[:, -1:], cache=batch_cache)
    for r in range(rows):
        cache = make_prompt_cache(model)
        model(tokens[r : r + 1, :-1], cache=cache)
        one = model(tokens[r : r + 1, -1:], cache=cache)
        assert np.array_equal(np.array(batch[r : r + 1]), np.array(one)), r
