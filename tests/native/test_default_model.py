"""The embedded default model on the native kernels: the server picks them by default and
says so, and greedy text follows the float32 path's wherever that path's choice is decided
by more than the routed kernels' rounding, on float16 KV caches (the default) as on float32
ones, at a short and at a ~1,700-token context."""

from __future__ import annotations

import httpx
import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm import stream_generate
from mlx_lm.models.cache import make_prompt_cache

from vllm_mlx import native
from vllm_mlx.models import load_model
from vllm_mlx.native.layers import KV_ENV

pytestmark = [
    pytest.mark.slow,
    pytest.mark.default_activations,  # the text a user gets: int16 decode products
    pytest.mark.skipif(not native.available(), reason="vllm_mlx.native is not built"),
]
PROMPTS = [
    "What is the capital of France?",
    "Write a short poem about the sea.",
    "List three uses of a paperclip, one per line.",
]

COLORS = ("red", "blue", "green", "yellow", "black", "white", "orange")
# a long context (~1,700 tokens) whose answer needs a row far back in the cache
LONG_PROMPT = (
    "".join(f"Box {i} is {COLORS[i % 7]} and holds {(i * 37) % 101} marbles.\n" for i in range(120))
    + "How many marbles does box 17 hold, and what color is it?"
)


# Logit error of the routed path against float32: the bf16-class attention bodies (amx, the
# default where the CPU has it) measured max |Δlogit| 0.30-0.48 over 8k tokens of text
# (docs/native-kernels.md), the int16 products far less. Where float32's best two tokens
# are closer than this, either is the model's answer.
NEAR_TIE = 0.5


def greedy_steps(model, tokenizer, question: str, max_tokens: int = 40) -> list[tuple[int, float]]:
    """Each greedy token with the margin of its logit over the runner-up."""
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True
    )
    steps = []
    for r in stream_generate(model, tokenizer, prompt, max_tokens=max_tokens):
        best, second = sorted(mx.topk(r.logprobs, 2).tolist(), reverse=True)
        steps.append((r.token, best - second))
    return steps


def assert_follows(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> None:
    """`got` is `want` token for token up to the end, or up to a step where `want` itself
    was a near-tie and `got` took the other branch."""
    for i, (token, margin) in enumerate(want):
        assert i < len(got), f"stopped after {i} of {len(want)} tokens"
        if got[i][0] != token:
            assert margin < NEAR_TIE, (
                f"token {i}: {got[i][0]} against {token} (margin {margin:.3f})"
            )
            return
    assert len(got) == len(want)


def test_greedy_text_follows_the_float32_path(embedded_model, monkeypatch) -> None:
    routed = embedded_model  # quantized weights: the default where the native kernels are built
    dense = load_model(None, cpu_weights="float32", progress=False)
    assert routed.kernels.startswith("native") and dense.kernels == "mlx"
    quantized = [
        layer
        for _, layer in routed.model.named_modules()
        if isinstance(layer, nn.QuantizedLinear | nn.QuantizedEmbedding)
    ]
    # the GGUF's fp16 scales and mins, kept float16 (4 bytes a group, not 8)
    assert len(quantized) == 211
    assert {(q.scales.dtype, q.biases.dtype) for q in quantized} == {(mx.float16, mx.float16)}
    for question in [*PROMPTS, LONG_PROMPT]:
        want = greedy_steps(dense.model, dense.tokenizer, question)
        for kv in ("f16", "f32"):
            monkeypatch.setenv(KV_ENV, kv)
            assert_follows(greedy_steps(routed.model, routed.tokenizer, question), want)
    # and the logits of a long prompt stay within float32 accumulation noise (f16 KV: its
    # rounding too), the cache float16
    monkeypatch.setenv(KV_ENV, "f16")
    ids = mx.array([[1, *range(200, 1200)]])
    cache = make_prompt_cache(routed.model)
    got, want = routed.model(ids, cache=cache)[0, -1], dense.model(ids)[0, -1]
    assert cache[0].keys.dtype == mx.float16
    assert mx.abs(got - want).max().item() < 2e-2 * (1 + mx.abs(want).max().item())


def test_server_runs_the_native_kernels_by_default(real_server: str) -> None:
    health = httpx.get(f"{real_server}/health", timeout=30).json()
    kernels = health["cpu_kernels"]
    assert kernels["enabled"] and "quantized_matmul" in kernels["kernels"]
    assert "quantized linear" in kernels["routed"]
