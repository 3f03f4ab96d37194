"""Same request, same numbers: on the embedded model with the default switches (float16 KV
cache, int16 products, prefix cache), every step's logits — not just the tokens — equal a
cold run's bits whatever the cache holds (a partial hit at any token, a full hit, the
conversation's earlier turn, an entry read back from disk), the prefill chunk size and the
batch's neighbours; greedy and seeded, with ``--kv-bits 8`` and with a draft model too."""

from __future__ import annotations

import pytest
from same_numbers import SAMPLING, assert_same, run

from vllm_mlx.engine.cache_files import DiskCache
from vllm_mlx.engine.drafting import Drafting
from vllm_mlx.engine.prefix_cache import PrefixCache
from vllm_mlx.engine.sources import ModelBatchSource

pytestmark = pytest.mark.slow


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


@pytest.fixture(params=["default", "kv_bits_8", "draft"])
def options(request, loaded) -> dict:
    return {
        "default": {},
        "kv_bits_8": {"kv_bits": 8},
        "draft": {"drafting": Drafting(draft_model=loaded.model, num_draft_tokens=3)},
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
    drafted = run(
        ModelBatchSource(model, drafting=Drafting(draft_model=model)), [prompt], sampling, n=10
    )[0]
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


@pytest.mark.parametrize("sampling", SAMPLING.values(), ids=SAMPLING.keys())
def test_admitted_mid_decode_among_neighbours_of_any_length_gives_the_cold_numbers(
    loaded, prompts, options: dict, sampling: dict
) -> None:
    """Neighbours of 3, 20 and the long prompt's tokens already decoding (or prefilling in
    shared chunks) when the request arrives, and one arriving after it."""
    model, prompt, long = loaded.model, prompts["prompt"], prompts["neighbour"]
    cold = run(ModelBatchSource(model, **options), [prompt], sampling)[0]
    batch = [prompt[:3], long, prompt[:20], prompt, long[:9]]
    for delays in ([0, 0, 1, 2, 3], [0, 1, 1, 1, 5]):
        got = run(ModelBatchSource(model, **options), batch, sampling, admitted_after=delays)
        assert_same(got[3], cold, f"admitted after {delays[3]} steps among {delays}")
