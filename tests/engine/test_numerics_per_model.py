"""A model's sampler and normalization are its own: an engine on a model the native load did
not patch draws with MLX's ops before and after another model is patched in the same
process, and a patched model's engine draws with the native kernels from its first step,
so a seeded request's answer does not depend on what the process loaded before."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from tiny_models import build_tiny_model, build_tiny_tokenizer

from vllm_mlx import native
from vllm_mlx.engine.sampling import (
    MLX_OPS,
    SamplingParams,
    give_numerics,
    make_sampler,
    numerics_of,
)
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.native import patch
from vllm_mlx.native.sampling import draw

pytestmark = pytest.mark.skipif(not native.available(), reason="vllm_mlx.native is not built")
PROMPT = [5, 9, 17, 33, 2, 41, 8]


def seeded_run(model: nn.Module, seed: int = 1234, n: int = 8) -> tuple[list[int], np.ndarray]:
    """A seeded request's tokens and the log-probabilities of each step."""
    source = ModelBatchSource(model)
    source.insert(
        PROMPT,
        sampler=make_sampler(SamplingParams(temperature=1.0, seed=seed)),
        processors=[],
        max_tokens=n,
    )
    tokens, logprobs = [], []
    while len(tokens) < n:
        steps, _ = source.step()
        for step in steps:
            tokens.append(step.token)
            logprobs.append(np.array(step.logprobs))
    return tokens, np.stack(logprobs)


def quantized_llama(seed: int) -> nn.Module:
    model = build_tiny_model(build_tiny_tokenizer(), seed=seed, arch="llama", hidden_size=64)
    nn.quantize(model, group_size=32, bits=4)
    mx.eval(model.parameters())
    return model


def test_a_seeded_answer_does_not_depend_on_a_later_native_load() -> None:
    plain = build_tiny_model(build_tiny_tokenizer(), seed=3, arch="qwen3")
    before = seeded_run(plain)
    patched = quantized_llama(seed=4)
    patch.enable(patched)  # what loading a model natively does
    assert numerics_of(plain) is MLX_OPS
    assert numerics_of(patched).draw is draw
    after = seeded_run(plain)
    assert before[0] == after[0]
    assert np.array_equal(before[1], after[1])  # the same bits, not only the same tokens


def test_a_patched_model_draws_natively_whatever_was_loaded_first() -> None:
    """A patched model's seeded answer is the same with an unpatched model stepped before it
    in the process, and it is the native draw's (MLX's ops give other tokens for the same
    seeds, so the routing shows in the answer)."""
    patched = quantized_llama(seed=5)
    patch.enable(patched)
    alone = [seeded_run(patched, seed=s) for s in range(4)]
    seeded_run(build_tiny_model(build_tiny_tokenizer(), seed=3, arch="qwen3"))
    for s, (tokens, logprobs) in enumerate(alone):
        again = seeded_run(patched, seed=s)
        assert again[0] == tokens and np.array_equal(again[1], logprobs)
    give_numerics(patched, MLX_OPS)
    assert [seeded_run(patched, seed=s)[0] for s in range(4)] != [t for t, _ in alone]


def greedy_logits(model: nn.Module, n: int = 4) -> list[np.ndarray]:
    seen: list[np.ndarray] = []

    def record(tokens, row):
        seen.append(np.array(row))
        return row

    source = ModelBatchSource(model)
    source.insert(
        PROMPT * 2,
        sampler=make_sampler(SamplingParams(temperature=0)),
        processors=[record],
        max_tokens=n,
    )
    for _ in range(n):
        source.step()
    return seen


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_an_unpatched_model_keeps_mlx_s_attention_after_a_native_load(arch) -> None:
    """The native load wraps its architecture's attention function for its own attention
    layers only: another model of the same architecture keeps MLX's attention bits."""
    plain = build_tiny_model(build_tiny_tokenizer(), seed=6, arch=arch, hidden_size=64)
    before = greedy_logits(plain)
    patched = build_tiny_model(build_tiny_tokenizer(), seed=7, arch=arch, hidden_size=64)
    nn.quantize(patched, group_size=32, bits=4)
    patch.enable(patched)
    after = greedy_logits(plain)
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
