"""Native CPU kernels for MLX's CPU backend: quantized matmul and decode attention.

MLX's Linux CPU backend multiplies quantized weights with a plain loop and runs the
attention softmax scalar, so the server used to dequantize to float32 (5x the bytes read
per token). ``_kernels`` is an MLX extension (``csrc/``, built by ``scripts/install.sh``)
with AVX2 kernels for MLX's own affine 4/8-bit layout; ``patch.py`` routes a loaded
model's quantized layers and attention to it. Without a compiler the extension is simply
absent and everything falls back to MLX's own ops.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # importing mlx.core waits for the first kernel call
    import mlx.core as mx

Triple = tuple["mx.array", "mx.array", "mx.array"]  # a quantized (w, scales, biases)

KERNELS = (
    "quantized_matmul",
    "dequantize",
    "attention",
    "attention_masked",
    "rms_norm",
    "rope",
    "rope_offsets",
    "mlp_block",
    "attention_input",
    "decode_layers",
    "kv_write",
    "softmax_causal",
    "logsumexp",
    "sample",
)
DISABLE_ENV = "VLLM_MLX_NATIVE"  # "0" turns the kernels off without rebuilding
ACTIVATIONS_ENV = (
    "VLLM_MLX_NATIVE_ACTIVATIONS"  # "int16" (default), "int8" or "float" (read in C++)
)
_routed: list[str] = []  # what patch.enable routed, latest last (for status())


@functools.cache
def _load() -> tuple[ModuleType | None, str | None]:
    """The extension (imported on first use: it imports mlx.core) or why it is missing."""
    if sys.platform == "darwin":
        return None, "not used on macOS: MLX's Metal kernels are fast there"
    try:  # built in place by scripts/build_native.sh
        return importlib.import_module(f"{__name__}._kernels"), None
    except ImportError as error:  # not built, or built against another mlx
        return None, f"not built ({error})"


def _extension() -> ModuleType:
    kernels, reason = _load()
    if kernels is None:
        raise RuntimeError(f"the native kernels are not available: {reason}")
    return kernels


def available() -> bool:
    """True when the extension is built, importable and not disabled by the environment."""
    return os.environ.get(DISABLE_ENV, "1") != "0" and _load()[0] is not None


def provides(kernel: str) -> bool:
    """Whether the built extension has ``kernel`` (a library built before it was added
    lacks it until ``scripts/build_native.sh`` runs again)."""
    return available() and hasattr(_load()[0], kernel)


def status() -> dict[str, Any]:
    """What /health and the start-up log report about the native kernels."""
    kernels, reason = _load()
    if kernels is None:
        return {"built": False, "enabled": False, "kernels": [], "reason": reason}
    enabled = available()
    return {
        "built": True,
        "enabled": enabled,
        "isa": kernels.isa(),
        "activations": kernels.activations(),
        "int16_body": int16_body(),
        "packed": packed_mode(),
        "attention_body": attention_body(),
        "threads": kernels.threads(),
        "kernels": list(KERNELS) if enabled else [],
        # None: no model in this process runs on them (e.g. float32 weights)
        "routed": _routed[-1] if _routed else None,
        **({} if enabled else {"reason": f"{DISABLE_ENV}=0"}),
    }


def record_routed(description: str) -> None:
    """Remember what a model routed to the kernels, for ``status()``."""
    _routed.append(description)


def quantized_matmul(
    x: mx.array, w: mx.array, scales: mx.array, biases: mx.array, group_size: int, bits: int
) -> mx.array:
    """``x @ dequantize(w, scales, biases).T`` on the native kernel (see ``_kernels``)."""
    return _extension().quantized_matmul(x, w, scales, biases, group_size, bits)


def dequantize(
    w: mx.array, scales: mx.array, biases: mx.array, group_size: int, bits: int
) -> mx.array:
    """``dequantize(w, scales, biases)`` as float32 ``[N, K]`` on the native kernel."""
    return _extension().dequantize(w, scales, biases, group_size, bits)


def attention(
    q: mx.array, k: mx.array, v: mx.array, scale: float, causal: bool = False
) -> mx.array:
    """``softmax(q k^T * scale) v`` over grouped-query heads on the native kernel."""
    return _extension().attention(q, k, v, scale, causal)


def rms_norm(x: mx.array, weight: mx.array, eps: float) -> mx.array:
    """``mx.fast.rms_norm(x, weight, eps)`` for float32 ``x`` as one native node."""
    return _extension().rms_norm(x, weight, eps)


def rope_inv_freq(dims: int, base: float) -> mx.array:
    """``exp(-i ln(base) / (dims/2))`` computed as ``mx.fast.rope``'s CPU fallback does (MLX's
    own ``exp``), so the native rope's angles are the same floats as MLX's."""
    import mlx.core as mx
    import numpy as np

    half = dims // 2
    step = np.float32(np.log(np.float32(base))) / np.float32(half)
    return mx.exp(mx.arange(0, -half, -1, dtype=mx.float32) * mx.array(step))


def rope(
    x: mx.array, inv_freq: mx.array, dims: int, traditional: bool, scale: float, offset: int
) -> mx.array:
    """``mx.fast.rope`` for float32 ``x`` ``[B, H, L, D]`` and an int offset, one node;
    ``inv_freq`` from ``rope_inv_freq`` (or ``1 / freqs``)."""
    return _extension().rope(x, inv_freq, dims, traditional, scale, offset)


def rope_offsets(
    x: mx.array,
    inv_freq: mx.array,
    offsets: mx.array,
    dims: int,
    traditional: bool,
    scale: float,
) -> mx.array:
    """``mx.fast.rope`` with per-sequence int32 ``offsets`` ``[B]`` (a batched cache's)."""
    return _extension().rope_offsets(x, inv_freq, offsets, dims, traditional, scale)


def mlp_block(
    h: mx.array,
    norm_weight: mx.array,
    eps: float,
    gate: Triple,
    up: Triple,
    down: Triple,
    group_size: int,
    bits: int,
) -> mx.array:
    """``h + down(silu(gate(n)) * up(n))``, ``n = rms_norm(h)``; each projection is a
    quantized ``(w, scales, biases)`` triple (one group size and bit width)."""
    return _extension().mlp_block(
        h, norm_weight, eps, list(gate), list(up), list(down), group_size, bits
    )


def attention_input(
    x: mx.array,
    norm_weight: mx.array,
    eps: float,
    q: Triple,
    k: Triple,
    v: Triple,
    group_size: int,
    bits: int,
    heads: tuple[int, int],
    inv_freq: mx.array,
    rope: tuple[int, bool, float],
    offset: int,
) -> list[mx.array]:
    """``[q, k, v]`` heads ``[B, H, L, head_dim]`` of ``rms_norm(x)`` through quantized
    projections, q and k rotated (``rope`` = dims, traditional, scale) at ``offset``."""
    dims, traditional, scale = rope
    return _extension().attention_input(
        x, norm_weight, eps, list(q), list(k), list(v), group_size, bits, heads[0], heads[1],
        inv_freq, dims, traditional, scale, offset,
    )  # fmt: skip


def attention_masked(
    q: mx.array, k: mx.array, v: mx.array, scale: float, mask: mx.array
) -> mx.array:
    """``attention`` with a boolean ``mask`` (true: attend) broadcastable to
    ``[B, Hq, Lq, Lk]``, as mlx-lm's batched caches make for left-padded sequences."""
    return _extension().attention_masked(q, k, v, scale, mask)


def decode_weights(weights: Sequence[mx.array], *quant_and_heads: int) -> Any:
    """A stack's weights (``decode.layer_weights`` of every layer) checked, contiguous and
    held once for ``decode_layers``; ``quant_and_heads``: the attention and MLP projections'
    group size and bits, then the query and KV head counts."""
    return _extension().decode_weights(list(weights), *quant_and_heads)


def decode_layers(
    h: mx.array,
    weights: Any,
    caches: Sequence[mx.array],
    positions: mx.array,
    key_start: mx.array,
    inv_freq: mx.array,
    *params: float | int | bool,
) -> list[mx.array]:
    """``[h, rows]``: a stack of Llama layers for one token per sequence (``decode.py``
    builds the arguments); ``weights``: ``decode_weights``' result, or the arrays it takes
    (checked on every call then); ``rows`` ``[layers, 2, B, Hkv, head_dim]`` are the new
    key and value rows, which ``kv_write`` puts in the caches."""
    if isinstance(weights, (list, tuple)):
        weights = decode_weights(weights, *(int(p) for p in params[1:7]))
    return _extension().decode_layers(
        h, weights, list(caches), positions, key_start, inv_freq, *params
    )


def softmax_causal(scores: mx.array, offset: int) -> mx.array:
    """Softmax over the last axis of float32 ``scores`` ``[..., L, Lk]``, query row ``i``
    seeing keys ``0 .. offset + i`` (the rest 0); ``offset >= Lk - 1``: every key."""
    return _extension().softmax_causal(scores, offset)


def kv_write(cache: mx.array, rows: mx.array, layer: int, which: int, index: int) -> mx.array:
    """``cache`` with row ``index`` set to ``rows[layer, which]``; in place when MLX may
    donate the cache's buffer (nothing else holds it), else into a copy."""
    return _extension().kv_write(cache, rows, layer, which, index)


def logsumexp(x: mx.array) -> mx.array:
    """``log(sum(exp(x)))`` over the last axis of float32 ``x``, kept with size 1 (MLX's
    semantics for nan and infinities)."""
    return _extension().logsumexp(x)


def sample(
    logprobs: mx.array, words: mx.array, top_p: float, min_p: float, top_k: int, inv_temp: float
) -> mx.array:
    """uint32 ``[B]``: a token per row of float32 log-probabilities ``[B, V]`` after
    mlx-lm's top-p, min-p and top-k (``top_p`` 1, ``min_p`` 0, ``top_k`` 0: off) and the
    temperature, drawn by inverse CDF from the row's uint32 words ``[B, 2]``."""
    return _extension().sample(logprobs, words, top_p, min_p, top_k, inv_temp)


def kv_write_copies() -> int:
    """How many cache buffers ``kv_write`` had to copy (a steady decode donates all)."""
    return int(_extension().kv_write_copies())


def check_activations_env() -> None:
    """A bad ``VLLM_MLX_NATIVE_ACTIVATIONS`` fails the model load (the extension reads it
    itself, and would take any other value for the default)."""
    value = os.environ.get(ACTIVATIONS_ENV, "int16")
    if value not in ("int16", "int8", "float"):
        raise ValueError(f"{ACTIVATIONS_ENV} must be int16, int8 or float, not {value!r}")


def set_activations(name: str) -> bool:
    """Select how products read x: "int16" (the default, bounded error), "int8" (int8
    activations' numbers, for the accuracy study) or "float" (exact to float rounding),
    for tests and benchmarks."""
    kernels = _load()[0]
    return kernels is not None and kernels.set_activations(name)


def int16_body() -> str | None:
    """Which body runs the int16 products: "vnni" (AVX-512 VNNI) or "avx2" (the same
    bits), None when the library is not built or predates the choice."""
    kernels = _load()[0]
    return kernels.int16_body() if kernels is not None and hasattr(kernels, "int16_body") else None


def set_int16_body(name: str) -> bool:
    """Select the int16 products' body ("vnni" or "avx2"), for tests and benchmarks;
    False when this CPU or build lacks it."""
    kernels = _load()[0]
    return (
        kernels is not None and hasattr(kernels, "set_int16_body") and kernels.set_int16_body(name)
    )


def packed_mode() -> str:
    """Which weights the int16 products run packed copies of: "auto" (the default: a
    model's that fit the budget, ``packing.py``), "1" (every product's) or "0" (none)."""
    kernels = _load()[0]
    if kernels is None or not hasattr(kernels, "packed_mode"):
        return "0"
    return str(kernels.packed_mode())


def set_packed_mode(mode: str) -> bool:
    """Select the packed mode, for tests and benchmarks; False when the build lacks it
    or ``mode`` is not one."""
    kernels = _load()[0]
    return bool(
        kernels is not None
        and hasattr(kernels, "set_packed_mode")
        and kernels.set_packed_mode(mode)
    )


def set_packed(on: bool) -> bool:
    """Pack every product's weights (True) or none (False), for tests and benchmarks."""
    return set_packed_mode("1" if on else "0")


def register_packed(
    w: mx.array, scales: mx.array, biases: mx.array, group_size: int, bits: int
) -> None:
    """Give these evaluated weights a packed copy (filled by their first product, freed
    with them): their products run on it unless the mode is "0"."""
    _extension().register_packed(w, scales, biases, group_size, bits)


def packed_count() -> tuple[int, int]:
    """The live packed copies and the bytes of those filled (freed weights' dropped)."""
    kernels = _load()[0]
    if kernels is None or not hasattr(kernels, "packed_count"):
        return (0, 0)
    entries, filled = kernels.packed_count()
    return int(entries), int(filled)


def attention_body() -> str | None:
    """Which body runs the attention: "bf16" (AVX-512 BF16 products, float32 sums and
    softmax), "amx" (the same roundings, the products on AMX tiles; the default where the
    CPU and kernel grant it) or "float" (float32 arithmetic; the default elsewhere and with
    ``VLLM_MLX_NATIVE_ATTENTION=float``), None when the library is not built or predates
    the choice."""
    kernels = _load()[0]
    if kernels is None or not hasattr(kernels, "attention_body"):
        return None
    return str(kernels.attention_body())


def set_attention_body(name: str) -> bool:
    """Select the attention's body ("amx", "bf16" or "float") for decode steps and prompt
    blocks alike, for tests and benchmarks; False when this CPU or build lacks it."""
    kernels = _load()[0]
    return (
        kernels is not None
        and hasattr(kernels, "set_attention_body")
        and bool(kernels.set_attention_body(name))
    )


def set_placement(name: str) -> bool:
    """Where the kernels' pool workers run: "auto" (each on a CPU of its own, off the
    calling thread's, or the calling thread alone, whichever its jobs ran faster with
    lately; the default), "apart" (always the former) or "kernel" (the kernel's placement;
    ``VLLM_MLX_NATIVE_PIN=0`` starts with it): for benchmarks. False for another name or
    when the kernels are not built."""
    kernels = _load()[0]
    return kernels is not None and kernels.set_placement(name)


def placement() -> tuple[str, bool] | None:
    """The pool's placement setting and whether its workers run apart now (under "auto",
    False while the calling thread runs jobs alone; None: no kernels)."""
    kernels = _load()[0]
    if kernels is None:
        return None
    name, apart = kernels.placement()
    return str(name), bool(apart)


def set_isa(name: str) -> bool:
    """Select the kernels' instruction set ("avx2" or "generic"), for tests and benchmarks."""
    kernels = _load()[0]
    return kernels is not None and kernels.set_isa(name)
