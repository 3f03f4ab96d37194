"""The runtime with adapters: a fused copy (``--adapter-fuse``) answers as mlx-lm does with
the adapter on the same base, and a runtime's adapter view runs its adapter."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx.utils import tree_unflatten
from mlx_lm.generate import generate_step
from mlx_lm.utils import load
from tiny_adapters import MAX_TOKENS, PROMPT, greedy, make_fleet

from vllm_mlx.request import Sampling
from vllm_mlx.runtime import build_runtime


@pytest.fixture(scope="module")
def float_fleet(tmp_path_factory):
    return make_fleet(tmp_path_factory.mktemp("float-adapters"), quantized=False)


def answer(pipeline) -> str:
    prepared = pipeline.prepare_completion(PROMPT, Sampling(temperature=0.0), MAX_TOKENS)
    return pipeline.complete_sync(prepared).message.content


def text_of(runtime, tokens: list[int]) -> str:
    tokenizer = runtime.loaded.tokenizer
    cut = next((i for i, t in enumerate(tokens) if t in set(tokenizer.eos_token_ids)), None)
    return tokenizer.decode(tokens[:cut])


def test_a_fused_copy_answers_as_the_adapter_does(float_fleet):
    for name in ("lora", "dora"):
        fused = build_runtime(str(float_fleet.base), fuse=str(getattr(float_fleet, name)))
        try:
            assert fused.adapters is None  # its weights are its own: no per-request adapters
            assert answer(fused.pipeline) == text_of(fused, float_fleet.expected[name])
        finally:
            fused.close()


def mlx_lm_fused_tokens(base, adapter) -> list[int]:
    """mlx-lm's own fuse (``mlx_lm.fuse``'s: each LoRA layer's ``fuse()``, quantized layers
    quantized again) and its greedy tokens."""
    model = load(str(base), adapter_path=str(adapter))[0]
    fused = [(n, m.fuse()) for n, m in model.named_modules() if hasattr(m, "fuse")]
    model.update_modules(tree_unflatten(fused))
    steps = generate_step(mx.array(PROMPT), model, max_tokens=MAX_TOKENS, sampler=greedy)
    return [int(token) for token, _ in steps]


def test_a_fused_quantized_copy_keeps_its_kernels_and_matches_mlx_lm_fuse(fleet):
    fused = build_runtime(str(fleet.base), fuse=str(fleet.lora))
    try:
        assert fused.loaded.kernels.startswith("native")
        expected = mlx_lm_fused_tokens(fleet.base, fleet.lora)
        assert answer(fused.pipeline) == text_of(fused, expected)
        assert expected != fleet.expected[None]
    finally:
        fused.close()


def test_a_pipeline_view_runs_its_adapter_beside_the_base(fleet):
    runtime = build_runtime(str(fleet.base), max_loaded_adapters=2)
    try:
        assert runtime.adapters is not None
        lora = runtime.adapters.load("lora", fleet.lora)
        view = runtime.pipeline.with_adapter(lora.choice, None)
        assert answer(view) == text_of(runtime, fleet.expected["lora"])
        assert answer(runtime.pipeline) == text_of(runtime, fleet.expected[None])
    finally:
        runtime.close()
