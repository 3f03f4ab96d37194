"""Speculative decoding with the checkpoint's MTP head: the same tokens as plain decoding
(greedy, penalties, seeded sampling), drafts accepted when they are right, the head's
rows kept in step with the sequence, and the switch."""

from __future__ import annotations

import threading
from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import make_prompt_cache
from tiny_mtp import OracleHeads, loaded_with_heads, write_mtp_folder

from vllm_mlx.engine.drafting import Drafting
from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.generation import GenerationRequest
from vllm_mlx.engine.mtp_speculative import MtpSpeculator
from vllm_mlx.engine.prefix_cache import PrefixCache
from vllm_mlx.engine.sampling import RequestSampler, SamplingParams
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.models.loader import load_model
from vllm_mlx.runtime import load_mtp

PROMPT = "<|im_start|>user\nWrite a haiku about rivers<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module", params=("deepseek_v3", "glm4_moe", "mimo", "qwen3_next"))
def checkpoint(request, tmp_path_factory):
    folder = write_mtp_folder(tmp_path_factory.mktemp(request.param), request.param, seed=4)
    return loaded_with_heads(folder)


# the 61-layer DeepSeek-V3 checkpoint runs the exactness tests; the longer runs skip it
LIGHT = pytest.mark.parametrize("checkpoint", ["glm4_moe", "mimo", "qwen3_next"], indirect=True)
# trimmable main caches: a prefix is served from any longer entry
TRIMMABLE = pytest.mark.parametrize("checkpoint", ["glm4_moe", "mimo"], indirect=True)


def tokens_of(source: ModelBatchSource, tokenizer: Any, prompt: list[int], **params) -> list[int]:
    engine = Engine(source, tokenizer)
    try:
        request = GenerationRequest(prompt, SamplingParams(**{"temperature": 0, **params}), [])
        return [t for c in engine.generate_sync(request) for t in c.token_ids]
    finally:
        engine.close()


@pytest.mark.parametrize(
    "params, mtp_tokens",
    [
        ({"max_tokens": 24}, 1),
        ({"max_tokens": 24}, 3),
        ({"max_tokens": 24, "repetition_penalty": 1.3}, 3),
        ({"max_tokens": 24, "temperature": 0.9, "seed": 11}, 1),
        ({"max_tokens": 24, "temperature": 0.7, "top_k": 20, "seed": 5}, 3),
    ],
    ids=["greedy", "greedy chained", "penalty", "seeded", "seeded top-k"],
)
def test_the_same_tokens_as_plain_decoding(checkpoint, params, mtp_tokens):
    loaded, heads = checkpoint
    prompt = loaded.tokenizer.encode(PROMPT)
    expected = tokens_of(ModelBatchSource(loaded.model), loaded.tokenizer, prompt, **params)
    source = ModelBatchSource(
        loaded.model, drafting=Drafting(mtp_heads=heads, mtp="on", mtp_tokens=mtp_tokens)
    )
    assert tokens_of(source, loaded.tokenizer, prompt, **params) == expected
    drafted, _ = source.spec_counts
    assert drafted >= 20  # "on": every step but the last proposes


@pytest.mark.parametrize("mtp_tokens", [1, 4])
def test_right_drafts_are_all_accepted(checkpoint, mtp_tokens):
    """A right head's every draft is kept, and the head's rows match the main cache."""
    loaded, heads = checkpoint
    prompt = loaded.tokenizer.encode(PROMPT)
    expected = tokens_of(ModelBatchSource(loaded.model), loaded.tokenizer, prompt, max_tokens=30)
    oracle = OracleHeads(heads, prompt + expected + [0, 0, 0, 0, 0], start=0)
    source = ModelBatchSource(
        loaded.model, drafting=Drafting(mtp_heads=oracle, mtp="on", mtp_tokens=mtp_tokens)
    )
    engine = Engine(source, loaded.tokenizer)
    try:
        request = GenerationRequest(prompt, SamplingParams(max_tokens=30, temperature=0), [])
        chunks = [c.token_ids for c in engine.generate_sync(request)]
    finally:
        engine.close()
    assert [t for c in chunks for t in c] == expected
    drafted, accepted = source.spec_counts
    assert drafted > 0 and accepted == drafted
    # one head row per position in the main cache (all but the last token), none left
    # from a chain
    assert oracle.rows[0].offset == len(prompt) + len(expected) - 1


@LIGHT
def test_auto_stops_proposing_while_drafts_are_rejected(checkpoint):
    loaded, heads = checkpoint
    prompt = loaded.tokenizer.encode(PROMPT)
    expected = tokens_of(ModelBatchSource(loaded.model), loaded.tokenizer, prompt, max_tokens=40)
    auto = ModelBatchSource(
        loaded.model, drafting=Drafting(mtp_heads=heads, mtp="auto", mtp_tokens=2)
    )
    assert tokens_of(auto, loaded.tokenizer, prompt, max_tokens=40) == expected
    drafted, accepted = auto.spec_counts
    # random weights: the head is wrong, so after a few verifies it pauses ("on" proposes
    # 2 at each of ~40 steps)
    assert accepted < drafted <= 20


def test_off_and_the_runtime_switch(checkpoint, tmp_path):
    loaded, heads = checkpoint
    prompt = loaded.tokenizer.encode(PROMPT)
    off = ModelBatchSource(loaded.model, drafting=Drafting(mtp_heads=heads, mtp="off"))
    assert not off.speculating
    tokens_of(off, loaded.tokenizer, prompt, max_tokens=8)
    assert off.spec_counts == (0, 0)
    assert load_mtp(loaded, "off") is None
    found = load_mtp(loaded, "auto")
    assert found is not None and found.family == loaded.model.model_type
    bare_folder = write_mtp_folder(tmp_path / "bare", "mimo", with_head=False)
    bare = load_model(str(bare_folder), cpu_weights="float32", progress=False)
    assert load_mtp(bare, "auto") is None
    with pytest.raises(ValueError, match="carries no multi-token-prediction head"):
        load_mtp(bare, "on")


@TRIMMABLE
def test_a_prompt_served_from_the_prefix_cache(checkpoint):
    """The head's context starts after a cached prefix; the tokens are still plain
    decoding's, and a right head is still always accepted."""
    loaded, heads = checkpoint
    first = loaded.tokenizer.encode(PROMPT)
    second = first + loaded.tokenizer.encode("Rivers run<|im_end|>\n<|im_start|>user\nMore")
    plain = ModelBatchSource(loaded.model)
    expected = [tokens_of(plain, loaded.tokenizer, p, max_tokens=16) for p in (first, second)]
    cache = PrefixCache(64 << 20)
    source = ModelBatchSource(
        loaded.model, prefix_cache=cache, drafting=Drafting(mtp_heads=heads, mtp="on")
    )
    assert tokens_of(source, loaded.tokenizer, first, max_tokens=16) == expected[0]
    served = cache.servable(np.asarray(second, dtype=np.int32))
    assert served >= len(first)
    assert tokens_of(source, loaded.tokenizer, second, max_tokens=16) == expected[1]
    served = cache.servable(np.asarray(second, dtype=np.int32))  # now its own entry
    oracle = OracleHeads(heads, second + expected[1] + [0] * 4, start=served)
    right = ModelBatchSource(
        loaded.model, prefix_cache=cache, drafting=Drafting(mtp_heads=oracle, mtp="on")
    )
    assert tokens_of(right, loaded.tokenizer, second, max_tokens=16) == expected[1]
    drafted, accepted = right.spec_counts
    assert drafted > 0 and accepted == drafted


@pytest.mark.parametrize("checkpoint", ["glm4_moe", "qwen3_next"], indirect=True)
def test_a_chain_accepted_in_part_leaves_the_cache_plain_decoding_has(checkpoint):
    """Chains of 3 kept in part (every third position proposed wrong): the tokens are plain
    decoding's, and after them the main cache holds what prefilling those tokens gives
    (Qwen3-Next: its recurrent layers restored and the accepted tokens run again)."""
    loaded, heads = checkpoint
    prompt = loaded.tokenizer.encode(PROMPT)
    expected = tokens_of(ModelBatchSource(loaded.model), loaded.tokenizer, prompt, max_tokens=24)
    oracle = OracleHeads(heads, prompt + expected + [0] * 4, start=0, miss=3)
    solo = MtpSpeculator(
        loaded.model,
        oracle,
        prompt=prompt,
        cache=make_prompt_cache(loaded.model),
        cached=0,
        sampler=RequestSampler(SamplingParams(temperature=0)),
        processors=[],
        max_tokens=24,
        num_draft=3,
        prefill_step_size=256,
        throttle=None,
    )
    counts = []
    tokens: list[int] = []
    while solo.remaining > 0:
        decided = solo.step()
        counts.append(len(decided) - 1)
        tokens += [d.token for d in decided]
    assert tokens == expected
    assert 0 < solo.accepted < solo.drafted
    assert {1, 2} <= set(counts)  # chains kept in part, not only all or none
    cache, held = solo.held()
    assert held == prompt + expected[:-1]
    plain = make_prompt_cache(loaded.model)
    loaded.model(mx.array([held]), cache=plain)
    for got, want in zip(cache, plain, strict=True):
        for a, b in zip(arrays(got), arrays(want), strict=True):
            assert a.shape == b.shape and mx.allclose(a, b, atol=1e-4)


def arrays(layer: Any) -> list[mx.array]:
    """A layer cache's contents: a KV cache's keys and values up to its offset, a recurrent
    layer's convolution and recurrent states."""
    if hasattr(layer, "keys"):
        return [layer.keys[..., : layer.offset, :], layer.values[..., : layer.offset, :]]
    return list(layer.cache)


@pytest.mark.parametrize("checkpoint", ["qwen3_next"], indirect=True)
def test_a_second_request_takes_the_recurrent_cache_into_the_batch(checkpoint):
    """Qwen3-Next decoded with its head while alone, then moved (its attention and recurrent
    caches) into the batch when a second request arrives: both get plain decoding's tokens."""
    loaded, heads = checkpoint
    first = loaded.tokenizer.encode(PROMPT)
    second = loaded.tokenizer.encode("<|im_start|>user\nName a colour<|im_end|>\n")
    plain = ModelBatchSource(loaded.model)
    expected = [
        tokens_of(plain, loaded.tokenizer, p, max_tokens=n) for p, n in ((first, 80), (second, 12))
    ]
    source = ModelBatchSource(
        loaded.model,
        prefix_cache=PrefixCache(64 << 20),
        drafting=Drafting(mtp_heads=heads, mtp="on", mtp_tokens=2),
    )
    engine = Engine(source, loaded.tokenizer)
    results: dict[str, list[int]] = {}
    started = threading.Event()

    def long_one() -> None:
        request = GenerationRequest(first, SamplingParams(max_tokens=80, temperature=0), [])
        out: list[int] = []
        for chunk in engine.generate_sync(request):
            out += chunk.token_ids
            started.set()
        results["first"] = out

    try:
        thread = threading.Thread(target=long_one)
        thread.start()
        assert started.wait(120)
        request = GenerationRequest(second, SamplingParams(max_tokens=12, temperature=0), [])
        results["second"] = [t for c in engine.generate_sync(request) for t in c.token_ids]
        thread.join()
    finally:
        engine.close()
    assert [results["first"], results["second"]] == expected
    assert source.spec_counts[0] > 0
    assert source.handovers == 1


@pytest.mark.parametrize("checkpoint", ["qwen3_next"], indirect=True)
def test_a_message_checkpoint_is_kept_while_decoding_alone(checkpoint):
    """An untrimmable cache is served only from an entry that is exactly a prefix, so the
    solo prefill stores the prompt's checkpoint as the batch does: a later prompt sharing
    the messages up to it is served from there, with plain decoding's tokens."""
    loaded, heads = checkpoint
    encode = loaded.tokenizer.encode
    system = encode("<|im_start|>system\nBe brief<|im_end|>\n")
    first = system + encode(PROMPT)
    second = system + encode("<|im_start|>user\nName a colour<|im_end|>\n")
    plain = ModelBatchSource(loaded.model)
    expected = [tokens_of(plain, loaded.tokenizer, p, max_tokens=12) for p in (first, second)]
    cache = PrefixCache(64 << 20)
    source = ModelBatchSource(
        loaded.model, prefix_cache=cache, drafting=Drafting(mtp_heads=heads, mtp="on")
    )
    assert source.checkpointing and source.speculating
    engine = Engine(source, loaded.tokenizer)
    try:
        got = []
        for prompt in (first, second):
            params = SamplingParams(max_tokens=12, temperature=0)
            request = GenerationRequest(prompt, params, [], checkpoints=[len(system)])
            # before the second: the first's checkpoint serves it
            assert cache.servable(np.asarray(second, dtype=np.int32)) == len(system) * len(got)
            got.append([t for c in engine.generate_sync(request) for t in c.token_ids])
    finally:
        engine.close()
    assert got == expected
    assert source.spec_counts[0] > 0
