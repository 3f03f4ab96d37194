"""Route a loaded mlx-lm model's quantized layers and attention to the native kernels.

No fork of mlx-lm: each eligible ``nn.QuantizedLinear`` / ``nn.QuantizedEmbedding``
changes class to a subclass whose matmul calls the kernel, and the model module's
``scaled_dot_product_attention`` (the one name every mlx-lm model calls) is wrapped; the
wrapper routes only calls made inside this model's own attention layers (they change class
too), so another model of the same architecture keeps MLX's attention.
Anything the kernels do not cover (other bits or modes, half-precision activations, mask
arrays, quantized KV caches, long query blocks) goes to MLX's own op unchanged.

A routed layer's scales and biases become float16 when that is lossless (always for
GGUF-derived weights, whose values were fp16): the kernels then read 4 bytes per group
instead of 8. MLX's own ops, where a routed layer falls back to them, get float32 copies
made on the fly, so their results and dtypes are what they were.

Fused Llama blocks keep their KV caches in float16 (``layers.kv_dtype``): the native
attention reads half keys and values; the prefill matmuls and MLX's SDPA fallback get
them upcast to the query's dtype.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import llama

from vllm_mlx import native
from vllm_mlx.engine.cpu import openblas_preloaded
from vllm_mlx.native import packing
from vllm_mlx.native.decode import route_model, stack_shape
from vllm_mlx.native.layers import (
    MAX_NATIVE_QUERY,
    NativeRMSNorm,
    NativeRoPE,
    attending_natively,
    blas_prefill,
    kv_dtype,
    route_block,
    routed_attention,
)
from vllm_mlx.native.sampling import route_logsumexp, route_sampling

# Past this many rows of x (a prefill chunk), dequantizing the layer once and letting
# OpenBLAS's sgemm multiply beats unpacking the weights for every block of 8 rows
# (measured crossover 64-256 rows, docs/native-kernels.md). Needs OpenBLAS preloaded: the
# bundled reference BLAS is slower than the native kernel at any size.
DEQUANTIZE_ROWS = 64
HALF_ENV = "VLLM_MLX_NATIVE_F16"  # "0": keep float32 scales and biases (for comparisons)


_BLAS_PRELOADED = openblas_preloaded()  # fixed for the process: set before it started
_ATTENTION_NAMES = ("self_attn", "attention", "attn")  # mlx-lm's attention layers' names


@dataclass
class Patched:
    """What ``enable`` routed, for the start-up log and /health."""

    linear: int = 0
    embedding: int = 0
    norms: int = 0
    ropes: int = 0
    mlp_blocks: int = 0
    attention_inputs: int = 0
    decode_stacks: int = 0
    attention_modules: tuple[str, ...] = ()
    packed_bytes: int = 0

    def describe(self) -> str:
        attention = ", ".join(self.attention_modules) or "none"
        return (
            f"{self.linear} quantized linear + {self.embedding} quantized embedding layers, "
            f"{self.norms} RMSNorm, {self.ropes} RoPE, {self.mlp_blocks} fused MLP + "
            f"{self.attention_inputs} fused attention-input blocks, "
            f"{self.decode_stacks} one-node decode stacks, "
            f"attention in {attention}, logsumexp in mlx_lm.generate, "
            f"{self.packed_bytes / 2**20:.0f} MiB of packed weight copies"
        )


def _eligible(layer: Any) -> bool:
    return (
        getattr(layer, "mode", "affine") == "affine"
        and layer.bits in packing.BITS
        and layer.group_size in packing.GROUP_SIZES
        and layer.get("biases") is not None
        and layer["scales"].dtype in (mx.float32, mx.float16)
        and layer["biases"].dtype == layer["scales"].dtype
    )


def _lossless_half(a: mx.array) -> mx.array | None:
    """``a`` as float16 if every value survives the round trip (and stays finite)."""
    half = a.astype(mx.float16)
    exact = mx.all(half.astype(mx.float32) == a) & mx.all(mx.isfinite(half))
    return half if exact.item() else None


def _halve_scales(layer: Any) -> None:
    """Store a routed layer's float32 scales and biases as float16 when that is lossless."""
    if os.environ.get(HALF_ENV, "1") == "0" or layer["scales"].dtype != mx.float32:
        return
    scales, biases = _lossless_half(layer["scales"]), _lossless_half(layer["biases"])
    if scales is not None and biases is not None:
        mx.eval(scales, biases)
        layer["scales"], layer["biases"] = scales, biases


def _float32(a: mx.array) -> mx.array:
    return a if a.dtype == mx.float32 else a.astype(mx.float32)


def _mlx_matmul(layer: Any, x: mx.array) -> mx.array:
    """MLX's own ``quantized_matmul`` on float32 scales and biases (the fallback)."""
    return mx.quantized_matmul(
        x,
        layer["weight"],
        scales=_float32(layer["scales"]),
        biases=_float32(layer["biases"]),
        transpose=True,
        group_size=layer.group_size,
        bits=layer.bits,
        mode=layer.mode,
    )


def _native_matmul(layer: Any, x: mx.array) -> mx.array | None:
    if x.dtype != mx.float32 or not native.available():
        return None
    quantized = (layer["weight"], layer["scales"], layer["biases"], layer.group_size, layer.bits)
    if x.size > DEQUANTIZE_ROWS * x.shape[-1] and _BLAS_PRELOADED and blas_prefill():
        return x @ native.dequantize(*quantized).T
    return native.quantized_matmul(x, *quantized)


class NativeQuantizedLinear(nn.QuantizedLinear):
    """``nn.QuantizedLinear`` whose float32 matmul runs on the native kernel."""

    def __call__(self, x: mx.array) -> mx.array:
        out = _native_matmul(self, x)
        if out is None:
            out = _mlx_matmul(self, x)
        return out + self["bias"] if "bias" in self else out


class NativeQuantizedEmbedding(nn.QuantizedEmbedding):
    """``nn.QuantizedEmbedding`` whose tied output projection runs on the native kernel."""

    def __call__(self, x: mx.array) -> mx.array:
        # the looked-up rows only, in float32 (MLX's float16 dequantize is slow on a CPU)
        return mx.dequantize(
            self["weight"][x],
            scales=_float32(self["scales"][x]),
            biases=_float32(self["biases"][x]),
            group_size=self.group_size,
            bits=self.bits,
            mode=self.mode,
        )

    def as_linear(self, x: mx.array) -> mx.array:
        out = _native_matmul(self, x)
        return _mlx_matmul(self, x) if out is None else out


def _route_attention(module_name: str) -> bool:
    """Wrap ``scaled_dot_product_attention`` in one mlx-lm model module (once)."""
    module = sys.modules.get(module_name)
    original = getattr(module, "scaled_dot_product_attention", None)
    if module is None or original is None:
        return False
    if getattr(original, "_vllm_mlx_native", False):
        return True

    def scaled_dot_product_attention(queries, keys, values, cache, scale, mask, sinks=None):
        if not attending_natively():  # a model the native load did not patch
            return original(queries, keys, values, cache, scale=scale, mask=mask, sinks=sinks)
        if _quantized(keys) and hasattr(cache, "bits") and not blas_prefill():
            keys, values, cache = _dequantized(keys, values, cache)
        if _attention_eligible(queries, keys, values, cache, mask, sinks):
            if isinstance(mask, mx.array):  # a batched cache's padding mask
                return native.attention_masked(queries, keys, values, scale, mask)
            return native.attention(queries, keys, values, scale, mask == "causal")
        if _prefill_eligible(queries, keys, values, cache, mask, sinks):
            return prefill_attention(queries, keys, values, scale, mask == "causal")
        keys, values = _like_queries(queries, keys, values)
        return original(queries, keys, values, cache, scale=scale, mask=mask, sinks=sinks)

    scaled_dot_product_attention._vllm_mlx_native = True  # type: ignore[attr-defined]
    scaled_dot_product_attention.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(module, "scaled_dot_product_attention", scaled_dot_product_attention)  # noqa: B010
    return True


def _routed_attention_call(self: Any, *args: Any, **kwargs: Any) -> Any:
    with routed_attention():
        return type(self).__mro__[1].__call__(self, *args, **kwargs)


_ROUTED_ATTENTION: dict[type, type] = {}


def _route_attention_layer(layer: Any) -> None:
    """``layer`` (an attention module of a routed model) calls the native attention."""
    cls = type(layer)
    if cls in _ROUTED_ATTENTION.values():
        return  # routed already
    if cls not in _ROUTED_ATTENTION:
        _ROUTED_ATTENTION[cls] = type(
            f"Native{cls.__name__}", (cls,), {"__call__": _routed_attention_call}
        )
    layer.__class__ = _ROUTED_ATTENTION[cls]


def _quantized(keys: Any) -> bool:
    return isinstance(keys, tuple) and len(keys) == 3


def _dequantized(keys, values, cache) -> tuple[mx.array, mx.array, None]:
    """A quantized KV cache's keys and values as floats, for the native attention: MLX's
    quantized attention sums a decode step's one query row in another order than a prompt
    block's rows (its matmul's row split), so a token attended at decode and the same token
    in a prompt would differ; dequantizing is elementwise, the same values either way."""
    group_size, bits = cache.group_size, cache.bits
    floats = [
        mx.dequantize(w, scales=scales, biases=biases, group_size=group_size, bits=bits)
        for w, scales, biases in (keys, values)
    ]
    return floats[0], floats[1], None


def _bool_mask(mask: Any) -> bool:
    """A boolean 4-D mask array (what mlx-lm's batched caches pass), which the kernel reads."""
    return isinstance(mask, mx.array) and mask.dtype == mx.bool_ and mask.ndim == 4


KV_DTYPES = (mx.float32, mx.float16)  # float16: a fused block's KV cache


def _like_queries(queries, keys, values) -> tuple[Any, Any]:
    """Keys and values in the queries' dtype for MLX's SDPA (a float16 KV cache read by
    float32 queries), unchanged otherwise (a quantized cache's tuples among them)."""
    if isinstance(keys, mx.array) and keys.dtype != queries.dtype and keys.dtype == mx.float16:
        return keys.astype(queries.dtype), values.astype(queries.dtype)
    return keys, values


def _plain_arrays(queries, keys, values, cache, sinks) -> bool:
    """What both native attention paths need: float32 4-D queries, float32 or float16
    keys and values of one dtype (not a quantized KV cache's tuples), no attention sinks."""
    return (
        native.available()
        and sinks is None
        and not hasattr(cache, "bits")  # quantized KV cache: tuples, not arrays
        and isinstance(keys, mx.array)
        and isinstance(values, mx.array)
        and queries.dtype == mx.float32
        and keys.dtype in KV_DTYPES
        and values.dtype == keys.dtype
        and queries.ndim == 4
    )


def _attention_eligible(queries, keys, values, cache, mask, sinks) -> bool:
    return (
        _plain_arrays(queries, keys, values, cache, sinks)
        and (mask is None or (isinstance(mask, str) and mask == "causal") or _bool_mask(mask))
        and (queries.shape[2] <= MAX_NATIVE_QUERY or not blas_prefill())
    )


def _prefill_eligible(queries, keys, values, cache, mask, sinks) -> bool:
    return (
        _plain_arrays(queries, keys, values, cache, sinks)
        and (mask is None or (isinstance(mask, str) and mask == "causal"))
        and keys.ndim == values.ndim == 4
        and queries.shape[1] % keys.shape[1] == 0
        and keys.shape[2] >= queries.shape[2]
    )


def prefill_attention(queries, keys, values, scale: float, causal: bool) -> mx.array:
    """Attention for a block of query rows: MLX's matmuls (BLAS) for the scores and the
    weighted values, the native softmax between them (MLX's CPU softmax runs its exp
    one lane at a time: ≈28% of a 2k-token prefill). Grouped-query heads share their
    KV head's matmul; a float16 cache is upcast for the float32 matmuls."""
    keys, values = _like_queries(queries, keys, values)
    B, Hq, L, D = queries.shape
    Hkv, Lk = keys.shape[1], keys.shape[2]
    rows = (queries * scale).reshape(B, Hkv, (Hq // Hkv) * L, D)
    scores = (rows @ keys.swapaxes(-1, -2)).reshape(B, Hq, L, Lk)
    weights = native.softmax_causal(scores, Lk - L if causal else Lk)
    out = weights.reshape(B, Hkv, (Hq // Hkv) * L, Lk) @ values
    return out.reshape(B, Hq, L, values.shape[-1])


def _fusable_mlp(block: Any) -> bool:
    """A Llama block whose MLP the fused native node computes exactly: RMSNorm before it,
    three eligible quantized projections of one group size and bit width, no biases."""
    mlp, norm = block.mlp, block.post_attention_layernorm
    projections: list[Any] = [getattr(mlp, n, None) for n in ("gate_proj", "up_proj", "down_proj")]
    return (
        type(mlp) is llama.MLP
        and isinstance(norm, nn.RMSNorm)
        and norm["weight"].dtype == mx.float32
        and all(isinstance(p, NativeQuantizedLinear) and "bias" not in p for p in projections)
        and len({(p.group_size, p.bits) for p in projections}) == 1
    )


def _fusable_attention(block: Any) -> bool:
    """A Llama block whose attention input (norm, q/k/v, RoPE) the fused node computes:
    plain RoPE, eligible quantized q/k/v of one group size and bit width, no biases."""
    attn, norm = block.self_attn, block.input_layernorm
    projections: list[Any] = [getattr(attn, n, None) for n in ("q_proj", "k_proj", "v_proj")]
    return (
        type(attn) is llama.Attention
        and isinstance(attn.rope, nn.RoPE)
        and isinstance(norm, nn.RMSNorm)
        and norm["weight"].dtype == mx.float32
        and all(isinstance(p, NativeQuantizedLinear) and "bias" not in p for p in projections)
        and len({(p.group_size, p.bits) for p in projections}) == 1
    )


def _products(model: nn.Module) -> list[Any]:
    """The routed layers whose weights the native products read: the linear layers, and
    the embedding when it is the output head too (no ``lm_head``)."""
    modules = list(model.named_modules())
    tied = not any(path.rsplit(".", 1)[-1] == "lm_head" for path, _ in modules)
    return [
        layer
        for _, layer in modules
        if type(layer) is NativeQuantizedLinear
        or (tied and type(layer) is NativeQuantizedEmbedding)
    ]


def enable(model: nn.Module) -> Patched:
    """Route ``model``'s eligible layers and attention to the native kernels."""
    kv_dtype()  # a bad VLLM_MLX_NATIVE_KV fails the load, not the first request
    blas_prefill()  # and a bad VLLM_MLX_NATIVE_PREFILL
    native.check_activations_env()
    packing.check_env()
    patched = Patched()
    attention_modules: set[str] = set()
    blocks, stacks = [], []
    attention_layers: list[Any] = []
    for path, layer in model.named_modules():
        if type(layer) is nn.QuantizedLinear and _eligible(layer):
            layer.__class__ = NativeQuantizedLinear
            _halve_scales(layer)
            patched.linear += 1
        elif type(layer) is nn.QuantizedEmbedding and _eligible(layer):
            layer.__class__ = NativeQuantizedEmbedding
            _halve_scales(layer)
            patched.embedding += 1
        elif type(layer) is nn.RMSNorm:
            layer.__class__ = NativeRMSNorm
            patched.norms += 1
        elif type(layer) is nn.RoPE:
            layer.__class__ = NativeRoPE
            patched.ropes += 1
        elif type(layer).__module__.startswith("mlx_lm.models."):
            attention_modules.add(type(layer).__module__)
            if path.rsplit(".", 1)[-1] in _ATTENTION_NAMES:
                attention_layers.append(layer)
            if type(layer) is llama.TransformerBlock:
                blocks.append(layer)
            elif type(layer) is llama.LlamaModel:
                stacks.append(layer)
    for block in blocks:  # after the loop: its projections must have been routed first
        if _fusable_mlp(block):
            fused_attention = _fusable_attention(block)
            route_block(block, DEQUANTIZE_ROWS if _BLAS_PRELOADED else None, fused_attention)
            patched.mlp_blocks += 1
            patched.attention_inputs += fused_attention
    for stack in stacks:  # after its blocks: every layer must be fused
        if (shape := stack_shape(stack)) is not None:
            route_model(stack, shape)
            patched.decode_stacks += 1
    patched.attention_modules = tuple(
        sorted(name for name in attention_modules if _route_attention(name))
    )
    for layer in attention_layers:
        if type(layer).__module__ in patched.attention_modules:
            _route_attention_layer(layer)
    route_logsumexp()
    route_sampling(model)
    patched.packed_bytes = packing.pack_model(model, _products(model))
    native.record_routed(patched.describe())
    return patched
