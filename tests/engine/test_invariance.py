"""Same request, same numbers: on the embedded model with the default switches (float16 KV
cache, int16 products, prefix cache), every step's logits — not just the tokens — equal a
cold run's bits whatever the cache holds (a partial hit at any token, a full hit, the
conversation's earlier turn, an entry read back from disk), the prefill chunk size and the
batch's neighbours; greedy and seeded, with ``--kv-bits 8`` and with a draft model too."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np
import pytest

from vllm_mlx import native
from vllm_mlx.engine.cache_files import DiskCache
from vllm_mlx.engine.prefix_cache import PrefixCache
from vllm_mlx.engine.sampling import SamplingParams, make_sampler
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.models import load_model

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not native.available(), reason="vllm_mlx.native is not built"),
]
SAMPLING = {"greedy": {"temperature": 0}, "seeded": {"temperature": 0.9, "seed": 1234}}
# each step's logits, the tokens, cached tokens, each token's log-probabilities
Run = tuple[list[np.ndarray], list[int], int, list[np.ndarray]]


@pytest.fixture(scope="module")
def loaded():
    return load_model(None, progress=False)


@pytest.fixture(scope="module")
def prompts(loaded) -> dict[str, list[int]]:
    chat = loaded.tokenizer.apply_chat_template
    system = {"role": "system", "content": "You are a helpful assistant who answers briefly."}
    return {
        "prompt": chat(
            [system, {"role": "user", "content": "Say hello and name three colours."}],
            add_generation_prompt=True,
        ),
        "neighbour": chat(
            [{"role": "user", "content": "Tell me a long story about a dragon."}],
            add_generation_prompt=True,
        ),
        "next_turn": loaded.tokenizer.encode("<|im_end|>\n<|im_start|>user\nAnd one more?"),
    }


def run(source: ModelBatchSource, prompts: list[list[int]], sampling: dict, n: int = 6) -> list:
    """Each prompt's (step logits, tokens, prompt tokens served from a cache), all inserted
    before the first step (one batch)."""
    runs: dict[int, Run] = {}
    for prompt in prompts:
        logits: list[np.ndarray] = []

        def record(tokens: Any, row: mx.array, logits: list = logits) -> mx.array:
            logits.append(np.array(row))
            return row

        uid, cached = source.insert(
            prompt,
            sampler=make_sampler(SamplingParams(**sampling)),
            processors=[record],
            max_tokens=n,
        )
        runs[uid] = (logits, [], cached, [])
    order = list(runs)
    finished: set[int] = set()
    while len(finished) < len(order):
        steps, ended = source.step()
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


@pytest.fixture(params=["default", "kv_bits_8", "draft"])
def options(request, loaded) -> dict:
    return {
        "default": {},
        "kv_bits_8": {"kv_bits": 8},
        "draft": {"draft_model": loaded.model, "num_draft_tokens": 3},
    }[request.param]


@pytest.mark.parametrize("sampling", SAMPLING.values(), ids=SAMPLING.keys())
def test_every_cache_state_chunk_size_and_batch_gives_the_cold_numbers(
    loaded, prompts, options: dict, sampling: dict
) -> None:
    model, prompt = loaded.model, prompts["prompt"]
    cold = run(ModelBatchSource(model, **options), [prompt], sampling)[0]
    for step in (7, 1):
        chunked = ModelBatchSource(model, prefill_step_size=step, **options)
        assert_same(run(chunked, [prompt], sampling)[0], cold, f"prefill chunks of {step}")
    for cut in (1, 12, len(prompt) // 2, len(prompt) - 1):
        source = ModelBatchSource(model, prefix_cache=PrefixCache(64 << 20), **options)
        run(source, [prompt[: cut + 1]], sampling, n=1)
        hit = run(source, [prompt], sampling)[0]
        assert hit[2] >= cut, cut
        assert_same(hit, cold, f"cached up to token {cut}")
    together = run(ModelBatchSource(model, **options), [prompts["neighbour"], prompt], sampling)
    assert_same(together[1], cold, "next to a neighbour")
    short = run(ModelBatchSource(model, **options), [prompt[:5], prompt, prompt], sampling)
    assert_same(short[1], cold, "next to a short neighbour and itself")
    assert_same(short[2], cold, "next to itself")


@pytest.mark.parametrize("sampling", SAMPLING.values(), ids=SAMPLING.keys())
def test_the_next_turn_over_the_cached_earlier_turn_gives_the_cold_numbers(
    loaded, prompts, options: dict, sampling: dict
) -> None:
    """The earlier turn's generated tokens come from decode steps and sit in the prefix
    cache; a cold run computes the same positions in one prompt block."""
    model, prompt = loaded.model, prompts["prompt"]
    source = ModelBatchSource(model, prefix_cache=PrefixCache(64 << 20), **options)
    answer = run(source, [prompt], sampling)[0][1]
    turn = [*prompt, *answer, *prompts["next_turn"]]
    cold = run(ModelBatchSource(model, **options), [turn], sampling)[0]
    cached = run(source, [turn], sampling)[0]
    assert cached[2] > len(prompt)  # generated tokens among them
    assert_same(cached, cold, "over the cached earlier turn")


@pytest.mark.parametrize("sampling", SAMPLING.values(), ids=SAMPLING.keys())
def test_a_draft_model_gives_the_numbers_decoding_without_one_gives(
    loaded, prompts, sampling: dict
) -> None:
    """Tokens, logits and log-probabilities: the verify pass normalizes each row on the
    kernel plain decoding's step uses."""
    model, prompt = loaded.model, prompts["prompt"]
    plain = run(ModelBatchSource(model), [prompt], sampling, n=10)[0]
    drafted = run(ModelBatchSource(model, draft_model=model), [prompt], sampling, n=10)[0]
    assert_same(drafted, plain, "with a draft model")


@pytest.mark.parametrize("sampling", SAMPLING.values(), ids=SAMPLING.keys())
def test_an_entry_read_back_from_disk_gives_the_cold_numbers(
    loaded, prompts, options: dict, sampling: dict, tmp_path
) -> None:
    model, prompt = loaded.model, prompts["prompt"]
    cold = run(ModelBatchSource(model, **options), [prompt], sampling)[0]

    def disk_source() -> ModelBatchSource:
        disk = DiskCache(tmp_path, "invariance", 1 << 30, min_tokens=1)
        return ModelBatchSource(model, prefix_cache=PrefixCache(64 << 20, disk=disk), **options)

    writer = disk_source()
    run(writer, [prompt[: len(prompt) // 2]], sampling, n=1)
    writer.flush()
    reader = disk_source()  # nothing in memory: the entry comes from its file
    got = run(reader, [prompt], sampling)[0]
    assert got[2] >= len(prompt) // 2
    assert_same(got, cold, "from the disk cache")
