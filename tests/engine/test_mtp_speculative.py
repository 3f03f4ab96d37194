"""Speculative decoding with the checkpoint's MTP head: the same tokens as plain decoding
(greedy, penalties, seeded sampling), drafts accepted when they are right, the head's
rows kept in step with the sequence, and the switch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tiny_mtp import OracleHeads, write_mtp_folder

from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.generation import GenerationRequest
from vllm_mlx.engine.prefix_cache import PrefixCache
from vllm_mlx.engine.sampling import SamplingParams
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.models.loader import load_model
from vllm_mlx.models.mtp_heads import load_mtp_heads
from vllm_mlx.runtime import load_mtp

PROMPT = "<|im_start|>user\nWrite a haiku about rivers<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module", params=("deepseek_v3", "glm4_moe", "mimo"))
def checkpoint(request, tmp_path_factory):
    folder = write_mtp_folder(tmp_path_factory.mktemp(request.param), request.param, seed=4)
    loaded = load_model(str(folder), cpu_weights="float32", progress=False)
    heads = load_mtp_heads(folder, loaded.model)
    assert heads is not None
    return loaded, heads


# the 61-layer DeepSeek-V3 checkpoint runs the exactness tests; the longer runs skip it
LIGHT = pytest.mark.parametrize("checkpoint", ["glm4_moe", "mimo"], indirect=True)


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
    source = ModelBatchSource(loaded.model, mtp_heads=heads, mtp="on", mtp_tokens=mtp_tokens)
    assert tokens_of(source, loaded.tokenizer, prompt, **params) == expected
    drafted, _ = source.spec_counts
    assert drafted >= 20  # "on": every step but the last proposes


@pytest.mark.parametrize("mtp_tokens", [1, 4])
def test_right_drafts_are_all_accepted(checkpoint, mtp_tokens):
    loaded, heads = checkpoint
    prompt = loaded.tokenizer.encode(PROMPT)
    expected = tokens_of(ModelBatchSource(loaded.model), loaded.tokenizer, prompt, max_tokens=30)
    oracle = OracleHeads(heads, prompt + expected + [0, 0, 0, 0, 0], start=0)
    source = ModelBatchSource(loaded.model, mtp_heads=oracle, mtp="on", mtp_tokens=mtp_tokens)
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
    auto = ModelBatchSource(loaded.model, mtp_heads=heads, mtp="auto", mtp_tokens=2)
    assert tokens_of(auto, loaded.tokenizer, prompt, max_tokens=40) == expected
    drafted, accepted = auto.spec_counts
    # random weights: the head is wrong, so after a few verifies it pauses ("on" proposes
    # 2 at each of ~40 steps)
    assert accepted < drafted <= 20


def test_off_and_the_runtime_switch(checkpoint, tmp_path):
    loaded, heads = checkpoint
    prompt = loaded.tokenizer.encode(PROMPT)
    off = ModelBatchSource(loaded.model, mtp_heads=heads, mtp="off")
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


@LIGHT
def test_a_prompt_served_from_the_prefix_cache(checkpoint):
    """The head's context starts after a cached prefix; the tokens are still plain
    decoding's, and a right head is still always accepted."""
    loaded, heads = checkpoint
    first = loaded.tokenizer.encode(PROMPT)
    second = first + loaded.tokenizer.encode("Rivers run<|im_end|>\n<|im_start|>user\nMore")
    plain = ModelBatchSource(loaded.model)
    expected = [tokens_of(plain, loaded.tokenizer, p, max_tokens=16) for p in (first, second)]
    cache = PrefixCache(64 << 20)
    source = ModelBatchSource(loaded.model, prefix_cache=cache, mtp_heads=heads, mtp="on")
    assert tokens_of(source, loaded.tokenizer, first, max_tokens=16) == expected[0]
    served = cache.servable(np.asarray(second, dtype=np.int32))
    assert served >= len(first)
    assert tokens_of(source, loaded.tokenizer, second, max_tokens=16) == expected[1]
    served = cache.servable(np.asarray(second, dtype=np.int32))  # now its own entry
    oracle = OracleHeads(heads, second + expected[1] + [0] * 4, start=served)
    right = ModelBatchSource(loaded.model, prefix_cache=cache, mtp_heads=oracle, mtp="on")
    assert tokens_of(right, loaded.tokenizer, second, max_tokens=16) == expected[1]
    drafted, accepted = right.spec_counts
    assert drafted > 0 and accepted == drafted
