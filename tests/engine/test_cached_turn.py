"""A short turn on a cached prefix: its suffix runs in one model call on the sequence's own
cache (no merge into a batch cache, no decode step of the prompt's last token), and its
numbers are the cold run's, alone and beside a running neighbour."""

from __future__ import annotations

import numpy as np
import pytest
from mlx_lm.models import cache as mlx_cache
from same_numbers import SAMPLING, assert_same, run

from vllm_mlx import native
from vllm_mlx.engine.prefix_cache import PrefixCache
from vllm_mlx.engine.sampling import SamplingParams, make_sampler
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.models import load_model

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not native.available(), reason="vllm_mlx.native is not built"),
]


@pytest.fixture(scope="module")
def loaded():
    return load_model(None, progress=False)


@pytest.fixture(scope="module")
def turn(loaded) -> tuple[list[int], list[int]]:
    """(a prefix of some 60 tokens, the next turn's 8 new tokens)."""
    text = "The quick brown fox jumps over the lazy dog near the river bank. " * 5
    prefix = loaded.tokenizer.encode(text)
    return prefix, loaded.tokenizer.encode(" And then what did the fox do next?")[:8]


class CallSpy:
    """The model, recording the number of tokens of each call."""

    def __init__(self, model):
        self.model = model
        self.calls: list[int] = []

    def __getattr__(self, name):
        return getattr(self.model, name)

    def __call__(self, inputs, cache=None, **kwargs):
        self.calls.append(int(inputs.shape[1]))
        return self.model(inputs, cache=cache, **kwargs)


def spy_on(source: ModelBatchSource, model) -> CallSpy:
    """Count the model calls a source makes from now on (new batches call the model the
    generator holds; the running generation batch holds its own)."""
    spy = CallSpy(model)
    source._gen.model = spy
    source._gen._generation_batch.model = spy
    return spy


def test_a_hit_runs_its_suffix_once_and_copies_no_cache_in_or_out_of_a_batch(
    loaded, turn, monkeypatch
) -> None:
    prefix, suffix = turn
    source = ModelBatchSource(loaded.model, prefix_cache=PrefixCache(64 << 20))
    run(source, [prefix], SAMPLING["greedy"], n=1)
    spy = spy_on(source, loaded.model)
    merges: list[int] = []
    merge = mlx_cache.BatchKVCache.merge.__func__

    def counted(cls, caches):
        merges.append(len(caches))
        return merge(cls, caches)

    monkeypatch.setattr(mlx_cache.BatchKVCache, "merge", classmethod(counted))
    extract = mlx_cache.BatchKVCache.extract
    extracts: list[int] = []

    def copied_out(self, idx):
        extracts.append(idx)
        return extract(self, idx)

    monkeypatch.setattr(mlx_cache.BatchKVCache, "extract", copied_out)
    sampler = make_sampler(SamplingParams(temperature=0))
    uid, cached = source.insert(prefix + suffix, sampler=sampler, processors=[], max_tokens=4)
    assert cached == len(prefix)
    steps: list = []
    while not steps:
        steps, _ = source.step()
    # the suffix with its last token in one call, then the first token's own decode step
    # (started before that token is returned); no cache merged into a batch cache
    assert spy.calls == [len(suffix), 1]
    assert merges == []
    while not any(s.at_limit for s in steps):
        steps, _ = source.step()
    # a one-row batch hands its arrays to the prefix cache: no row copied out
    assert extracts == []
    assert source.prefix_cache.served(np.asarray(prefix + suffix + [0])) == len(prefix + suffix)


@pytest.mark.parametrize("max_tokens", [1, 3])
def test_a_row_s_last_token_runs_no_forward_after_it_and_its_prompt_stays_cached(
    loaded, turn, max_tokens
) -> None:
    prefix, suffix = turn
    source = ModelBatchSource(loaded.model, prefix_cache=PrefixCache(64 << 20))
    run(source, [prefix], SAMPLING["greedy"], n=1)
    spy = spy_on(source, loaded.model)
    sampler = make_sampler(SamplingParams(temperature=0))
    source.insert(prefix + suffix, sampler=sampler, processors=[], max_tokens=max_tokens)
    tokens: list[int] = []
    ended = False
    while not ended:
        steps, _ = source.step()
        tokens += [s.token for s in steps]
        ended = any(s.at_limit for s in steps)
    # the suffix's call, then one decode call per token but the last: nothing computes the
    # logits after a row's last token (a one-token request's store waited for them)
    assert spy.calls == [len(suffix)] + [1] * (max_tokens - 1)
    assert len(tokens) == max_tokens
    assert (
        tokens
        == run(
            ModelBatchSource(loaded.model), [prefix + suffix], SAMPLING["greedy"], n=max_tokens + 1
        )[0][1][:max_tokens]
    )
    # the entry holds what its cache holds: the prompt and the tokens before the last
    held = prefix + suffix + tokens[:-1]
    assert source.prefix_cache.served(np.asarray(held + [-1])) == len(held)
    assert source.prefix_cache.served(np.asarray(held + tokens[-1:] + [-1])) == len(held)


@pytest.mark.parametrize("sampling", SAMPLING.values(), ids=SAMPLING.keys())
def test_a_hit_with_a_short_suffix_gives_the_cold_numbers(loaded, turn, sampling) -> None:
    prefix, suffix = turn
    cold = run(ModelBatchSource(loaded.model), [prefix + suffix], sampling)[0]
    source = ModelBatchSource(loaded.model, prefix_cache=PrefixCache(64 << 20))
    run(source, [prefix], sampling, n=1)
    hit = run(source, [prefix + suffix], sampling)[0]
    assert hit[2] == len(prefix)
    assert_same(hit, cold, "8 new tokens on a cached prefix")
    # beside a sequence already decoding, joined the step its prompt ends
    source = ModelBatchSource(loaded.model, prefix_cache=PrefixCache(64 << 20))
    run(source, [prefix], sampling, n=1)
    other = loaded.tokenizer.encode("Write a poem about the sea.")
    both = run(source, [other, prefix + suffix], sampling, admitted_after=[0, 2])
    assert both[1][2] == len(prefix)
    assert_same(both[1], cold, "8 new tokens on a cached prefix, beside a neighbour")
