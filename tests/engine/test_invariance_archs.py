"""Same request, same numbers beyond the embedded Llama: tiny random-weight Qwen3 and Qwen2
models (mlx-lm's classes, 4-bit weights) on both kernel lanes — the native one (the layers
``native.patch`` routes: quantized matmuls, norms, RoPE, attention; no fused Llama blocks)
and MLX's own ops (what macOS runs; marked ``mac_path``, so ``scripts/test_mac_path.sh``
runs it with no native extension at all) — give a cold run's logits and log-probabilities
bit for bit at every prefill chunk size, cache state and batch, greedy and seeded."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest
from same_numbers import SAMPLING, assert_same, run
from tiny_models import build_tiny_model, build_tiny_tokenizer

from vllm_mlx import native
from vllm_mlx.engine.drafting import Drafting
from vllm_mlx.engine.prefix_cache import PrefixCache
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.native import patch

pytestmark = pytest.mark.mac_path
PROMPT = [(i * 37 + 11) % 200 + 3 for i in range(30)]
LONG = [(i * 53 + 7) % 200 + 3 for i in range(70)]


@pytest.fixture(scope="module", params=["qwen3", "qwen2"])
def arch(request) -> str:
    return request.param


@pytest.fixture(scope="module", params=["native", "mlx"])
def model(request, arch) -> nn.Module:
    if request.param == "native" and not native.available():
        pytest.skip("vllm_mlx.native is not built (or VLLM_MLX_NATIVE=0)")
    built = build_tiny_model(build_tiny_tokenizer(), seed=2, arch=arch, hidden_size=64)
    nn.quantize(built, group_size=32, bits=4)
    mx.eval(built.parameters())
    if request.param == "native":
        patch.enable(built)
    return built


@pytest.mark.parametrize("sampling", SAMPLING.values(), ids=SAMPLING.keys())
def test_chunks_cache_states_and_batches_give_the_cold_numbers(model, sampling) -> None:
    cold = run(ModelBatchSource(model), [PROMPT], sampling)[0]
    for step in (1, 3, 7, 16):
        chunked = ModelBatchSource(model, prefill_step_size=step)
        assert_same(run(chunked, [PROMPT], sampling)[0], cold, f"prefill chunks of {step}")
    for cut in (1, 5, len(PROMPT) // 2, len(PROMPT) - 1):
        source = ModelBatchSource(model, prefix_cache=PrefixCache(16 << 20))
        run(source, [PROMPT[: cut + 1]], sampling, n=1)
        hit = run(source, [PROMPT], sampling)[0]
        assert hit[2] >= cut, cut
        assert_same(hit, cold, f"cached up to token {cut}")
    full = ModelBatchSource(model, prefix_cache=PrefixCache(16 << 20))
    run(full, [PROMPT], sampling)
    assert_same(run(full, [PROMPT], sampling)[0], cold, "a full hit")
    batch = [LONG, PROMPT[:3], PROMPT, LONG[:40]]
    assert_same(run(ModelBatchSource(model), batch, sampling)[2], cold, "with neighbours")
    for delays in ([0, 0, 2, 3], [0, 1, 1, 1]):
        source = ModelBatchSource(model, prefill_step_size=16, decode_steps_per_chunk=1)
        got = run(source, batch, sampling, admitted_after=delays)[2]
        assert_same(got, cold, f"admitted after {delays[2]} steps, chunks between decodes")
    for lookup in ("on", "auto"):  # n-gram proposals verified inside the batch
        source = ModelBatchSource(model, drafting=Drafting(prompt_lookup=lookup))
        assert_same(run(source, batch, sampling)[2], cold, f"prompt lookup {lookup}")


@pytest.mark.parametrize("sampling", SAMPLING.values(), ids=SAMPLING.keys())
def test_the_next_turn_over_the_cached_earlier_turn_gives_the_cold_numbers(model, sampling) -> None:
    source = ModelBatchSource(model, prefix_cache=PrefixCache(16 << 20))
    answer = run(source, [PROMPT], sampling)[0][1]
    turn = [*PROMPT, *answer, *LONG[:6]]
    cold = run(ModelBatchSource(model), [turn], sampling)[0]
    cached = run(source, [turn], sampling)[0]
    assert cached[2] > len(PROMPT)
    assert_same(cached, cold, "over the cached earlier turn")
