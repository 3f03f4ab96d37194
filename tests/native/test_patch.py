"""A real mlx-lm model routed to the native kernels gives MLX's own logits and greedy
tokens; whatever the kernels do not cover falls back to MLX's op."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx_lm.models import llama
from mlx_lm.models.cache import BatchKVCache, make_prompt_cache
from tiny_gguf import write_tiny_gguf
from tiny_models import build_tiny_model, build_tiny_tokenizer

from vllm_mlx import native
from vllm_mlx.models import load_model
from vllm_mlx.models.loader import choose_weights
from vllm_mlx.native import patch
from vllm_mlx.native.layers import (
    PREFILL_ENV,
    HalfWrites,
    NativeLlamaBlock,
    NativeRMSNorm,
    NativeRoPE,
)

pytestmark = pytest.mark.skipif(not native.available(), reason="vllm_mlx.native is not built")
PROMPT = mx.array([[1, 5, 9, 40, 77, 200, 259, 260, 2, 31, 7]])


def quantized_llama(bits: int, group_size: int, seed: int = 0, hidden: int = 128) -> nn.Module:
    """A tiny random Llama (4 query heads, 2 KV heads: head size hidden / 4), quantized."""
    model = build_tiny_model(
        build_tiny_tokenizer(), seed=seed, arch="llama", hidden_size=hidden, num_layers=2
    )
    nn.quantize(model, group_size=group_size, bits=bits)
    model.set_dtype(mx.float32)
    mx.eval(model.parameters())
    return model


def gguf_like(model: nn.Module) -> nn.Module:
    """Round every quantized layer's scales and biases to float16 values (GGUF's fp16
    scale and min), kept as float32 as the loader leaves them."""
    for _, layer in model.named_modules():
        if isinstance(layer, nn.QuantizedLinear | nn.QuantizedEmbedding):
            for name in ("scales", "biases"):
                layer[name] = layer[name].astype(mx.float16).astype(mx.float32)
    mx.eval(model.parameters())
    return model


def scale_dtypes(model: nn.Module) -> set[mx.Dtype]:
    return {
        layer[name].dtype
        for _, layer in model.named_modules()
        if isinstance(layer, nn.QuantizedLinear | nn.QuantizedEmbedding)
        for name in ("scales", "biases")
    }


def half_writes(cache: list) -> list:
    """An unpatched model's caches written in float16, as the native path's (the reference
    for a float16 KV cache: MLX's own ops on the same rounded keys and values)."""
    return [HalfWrites(c) for c in cache]


def greedy(
    model: nn.Module, steps: int = 24, half: bool = False
) -> tuple[list[int], list[np.ndarray]]:
    """Prefill the prompt, then decode one token at a time (the path the server runs);
    ``half``: the caches are given float16 keys and values (``half_writes``)."""
    cache = make_prompt_cache(model)
    if half:
        cache = half_writes(cache)
    logits = model(PROMPT, cache=cache)[:, -1, :]
    tokens, rows = [], []
    for _ in range(steps):
        rows.append(np.array(logits))
        token = mx.argmax(logits, axis=-1)
        tokens.append(token.item())
        logits = model(token[None], cache=cache)[:, -1, :]
    return tokens, rows


@pytest.mark.parametrize("bits, group_size", [(4, 32), (8, 32), (4, 64), (8, 128)])
def test_routed_model_gives_mlx_logits_and_tokens(kv: bool, bits: int, group_size: int) -> None:
    model = quantized_llama(bits, group_size)
    want_tokens, want_rows = greedy(model, half=kv)
    routed = patch.enable(model)
    assert routed.linear == 2 * 7 and routed.embedding == 1
    assert routed.attention_modules == ("mlx_lm.models.llama",)
    assert routed.mlp_blocks == routed.attention_inputs == 2 and routed.norms == 2 * 2 + 1
    assert type(model.model.layers[0].mlp.up_proj) is patch.NativeQuantizedLinear
    assert type(model.model.layers[0]) is NativeLlamaBlock
    got_tokens, got_rows = greedy(model)
    assert got_tokens == want_tokens
    for got, want in zip(got_rows, want_rows, strict=True):
        assert np.abs(got - want).max() <= 1e-4 * (1 + np.abs(want).max())


@pytest.mark.parametrize("bits, group_size", [(4, 32), (8, 32), (4, 64), (8, 128)])
def test_gguf_like_scales_run_as_float16_with_mlx_logits(bits: int, group_size: int) -> None:
    model = gguf_like(quantized_llama(bits, group_size, seed=2))
    want_tokens, want_rows = greedy(model)
    assert scale_dtypes(model) == {mx.float32}
    patch.enable(model)
    assert scale_dtypes(model) == {mx.float16}
    got_tokens, got_rows = greedy(model)
    assert got_tokens == want_tokens
    for got, want in zip(got_rows, want_rows, strict=True):
        assert np.abs(got - want).max() <= 1e-4 * (1 + np.abs(want).max())


def test_only_lossless_scales_become_float16(monkeypatch: pytest.MonkeyPatch) -> None:
    model = quantized_llama(4, 32)  # mx.quantize's float32 scales: not half values
    gguf_like(model.model.layers[0])
    attn = model.model.layers[1].self_attn
    attn.q_proj.scales = attn.q_proj.scales.astype(mx.float16).astype(mx.float32)  # not biases
    attn.k_proj.biases = mx.full(attn.k_proj.biases.shape, 1e5)  # exact but past float16
    attn.k_proj.scales = mx.zeros(attn.k_proj.scales.shape)
    patch.enable(model)
    assert scale_dtypes(model.model.layers[0]) == {mx.float16}
    assert scale_dtypes(model.model.layers[1]) == {mx.float32}
    assert model.model.embed_tokens.scales.dtype == mx.float32
    switched_off = gguf_like(quantized_llama(4, 32))
    monkeypatch.setenv(patch.HALF_ENV, "0")
    patch.enable(switched_off)
    assert scale_dtypes(switched_off) == {mx.float32}


def test_float16_layers_fall_back_to_mlx_in_float32(monkeypatch: pytest.MonkeyPatch) -> None:
    """MLX's ops, where routed layers fall back to them, see float32 scales: the same
    results and dtypes as before the patch (its float16 math would be slow and half)."""
    model = gguf_like(quantized_llama(4, 32))
    layer, embed = model.model.layers[0].mlp.down_proj, model.model.embed_tokens
    x = mx.random.normal((3, layer.weight.shape[1] * 8), key=mx.random.key(0))
    h = mx.random.normal((1, 2, embed.weight.shape[1] * 8), key=mx.random.key(1))
    ids = mx.array([[3, 0, 259]])
    half_x, half_h = x.astype(mx.float16), h.astype(mx.float16)
    calls = {
        "half-precision linear": lambda: layer(half_x),
        "embedding lookup": lambda: embed(ids),
        "half-precision as_linear": lambda: embed.as_linear(half_h),
    }
    off = {"linear": lambda: layer(x), "as_linear": lambda: embed.as_linear(h)}
    want = {name: call() for name, call in {**calls, **off}.items()}
    want_tokens, _ = greedy(model, steps=3)
    patch.enable(model)
    assert layer.scales.dtype == embed.biases.dtype == mx.float16
    for name, call in calls.items():
        got = call()
        assert got.dtype == want[name].dtype and mx.array_equal(got, want[name]).item(), name
    monkeypatch.setenv(native.DISABLE_ENV, "0")  # switched off at run time: MLX's ops
    for name, call in off.items():
        got = call()
        assert got.dtype == mx.float32 and mx.array_equal(got, want[name]).item(), name
    assert greedy(model, steps=3)[0] == want_tokens  # the whole model on MLX's ops


def test_decode_steps_reach_the_native_attention(monkeypatch: pytest.MonkeyPatch) -> None:
    model = quantized_llama(4, 32)
    patch.enable(model)
    model.model.__class__ = llama.LlamaModel  # the per-layer path (test_decode.py: the stack)
    calls: list[tuple[int, ...]] = []
    real = native.attention
    monkeypatch.setattr(native, "attention", lambda q, *a: calls.append(q.shape) or real(q, *a))
    greedy(model, steps=3)
    # the 11-token prefill and each one-token step: the one kernel (the same per-row sums)
    assert [shape[2] for shape in calls] == [11] * 2 + [1] * 2 * 3  # 2 layers, 3 steps
    calls.clear()
    monkeypatch.setenv(PREFILL_ENV, "blas")  # the prefill goes to MLX's SDPA
    greedy(model, steps=3)
    assert [shape[2] for shape in calls] == [1] * 2 * 3


@pytest.mark.parametrize("half", [False, True])
@pytest.mark.parametrize("blas", [True, False])
@pytest.mark.parametrize("prefill", ["invariant", "blas"])
def test_prefill_blocks_dequantize_once_when_openblas_multiplies(
    monkeypatch, blas: bool, half: bool, prefill: str
) -> None:
    """Only with VLLM_MLX_NATIVE_PREFILL=blas: by default a prompt block's rows take the
    decode rows' body."""
    monkeypatch.setenv(PREFILL_ENV, prefill)
    model = gguf_like(quantized_llama(4, 32)) if half else quantized_llama(4, 32)
    layer = model.model.layers[1].self_attn.o_proj
    x = mx.random.normal((2, 70, layer.weight.shape[1] * 8), key=mx.random.key(1))
    want = layer(x)
    patch.enable(model)
    assert layer.scales.dtype == (mx.float16 if half else mx.float32)
    monkeypatch.setattr(patch, "_BLAS_PRELOADED", blas)
    calls: list[int] = []
    real = native.dequantize
    monkeypatch.setattr(native, "dequantize", lambda *a: calls.append(1) or real(*a))
    got = layer(x)
    assert calls == ([1] if blas and prefill == "blas" else [])
    assert np.abs(np.array(got) - np.array(want)).max() <= 1e-4 * (1 + np.abs(want).max())


def test_what_the_kernels_do_not_cover_uses_mlx(monkeypatch: pytest.MonkeyPatch) -> None:
    model = quantized_llama(4, 32)
    layer = model.model.layers[0].mlp.down_proj
    x = mx.random.normal((3, layer.weight.shape[1] * 8), key=mx.random.key(0))
    want = layer(x)
    patch.enable(model)
    calls: list[int] = []
    real = native.quantized_matmul
    monkeypatch.setattr(native, "quantized_matmul", lambda *a: calls.append(1) or real(*a))
    assert np.allclose(np.array(layer(x)), np.array(want), atol=1e-4) and calls == [1]
    half = layer(x.astype(mx.float16))  # half precision: MLX's op
    assert np.allclose(np.array(half.astype(mx.float32)), np.array(want), atol=0.05)
    monkeypatch.setenv(native.DISABLE_ENV, "0")  # switched off at run time: MLX's op
    assert not native.available()
    assert mx.array_equal(layer(x), want).item()
    assert calls == [1]
    three_bit = quantized_llama(3, 32)
    assert patch.enable(three_bit).linear == 0


def test_loader_runs_quantized_weights_natively(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    types = {"token_embd": "Q8_0", "attn_q": "Q4_1", "ffn_down": "Q4_0"}
    source = write_tiny_gguf(tmp_path / "tiny-q.gguf", tensor_types=types)
    loaded = load_model(str(tmp_path / "tiny-q.gguf"), cpu_weights="quantized", progress=False)
    assert loaded.weights == "quantized" and loaded.kernels.startswith("native")
    assert scale_dtypes(loaded.model) == {mx.float16}  # GGUF's fp16 scales, lossless
    assert choose_weights("auto") == "quantized"  # the kernels are built
    ids = mx.array([[1, 5, 9, 40, 77, 200]])
    got, want = loaded.model(ids), source(ids)
    assert np.abs(np.array(got) - np.array(want)).max() < 0.05  # 4-bit quantization error


def test_decode_steps_are_a_few_native_nodes_per_layer(monkeypatch) -> None:
    """Each decode step of a routed block goes through the fused primitives."""
    model = quantized_llama(4, 32)
    patch.enable(model)
    model.model.__class__ = llama.LlamaModel  # the per-layer path (test_decode.py: the stack)
    calls: list[str] = []
    for name in ("attention_input", "mlp_block"):
        real = getattr(native, name)
        monkeypatch.setattr(native, name, lambda *a, _n=name, _r=real: calls.append(_n) or _r(*a))
    greedy(model, steps=3)
    # prefill (11 rows) and 3 decode steps, 2 layers each
    assert calls.count("attention_input") == calls.count("mlp_block") == 2 * 4


def test_batched_caches_agree_with_mlx(kv: bool) -> None:
    """BatchKVCache (array offsets, padding masks): unfused attention, native RoPE and
    masked attention kernel, the same logits as MLX."""
    model = quantized_llama(4, 32, seed=3)
    prompt = mx.array([[0, 5, 9, 40], [1, 7, 8, 3]])

    def run(half: bool) -> np.ndarray:
        cache = [BatchKVCache(left_padding=[1, 0]) for _ in model.layers]
        feed = half_writes(cache) if half else cache
        first = model(prompt, cache=feed)[:, -1, :]
        step = model(mx.argmax(first, axis=-1)[:, None], cache=feed)[:, -1, :]
        assert cache[0].keys.dtype == (mx.float16 if kv else mx.float32)
        return np.array(step)

    want = run(half=kv)
    patch.enable(model)
    got = run(half=False)
    assert np.abs(got - want).max() <= 1e-4 * (1 + np.abs(want).max())


def test_generic_isa_gives_the_same_tokens() -> None:
    model = quantized_llama(4, 64, seed=1)
    want, _ = greedy(model, steps=12)
    patch.enable(model)
    best = native.status()["isa"]
    assert native.set_isa("generic")
    try:
        got, _ = greedy(model, steps=12)
    finally:
        native.set_isa(best)
    assert got == want


def test_norm_and_rope_fall_back_where_the_nodes_do_not_cover() -> None:
    x = mx.random.normal((2, 3, 16), key=mx.random.key(5))
    norm = nn.RMSNorm(16)
    norm.weight = norm.weight.astype(mx.float16)  # half-precision weight: MLX's op
    want = norm(x)
    norm.__class__ = NativeRMSNorm
    assert mx.array_equal(norm(x), want).item()
    rope = nn.RoPE(16, base=10000.0)
    q = mx.random.normal((2, 4, 3, 16), key=mx.random.key(6))
    offsets = mx.array([3, -1])  # a left-padded batched cache's per-sequence offsets
    scalar = mx.array(2)  # a 0-d array offset: MLX's op
    want_array, want_int, want_scalar = rope(q, offsets), rope(q, 7), rope(q, scalar)
    rope.__class__ = NativeRoPE
    assert np.abs(np.array(rope(q, offsets) - want_array)).max() <= 1e-6
    assert np.abs(np.array(rope(q, 7) - want_int)).max() <= 1e-6
    assert mx.array_equal(rope(q, scalar), want_scalar).item()
