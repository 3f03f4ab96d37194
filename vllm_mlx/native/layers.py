"""Layer classes whose per-token work runs as single native nodes on the CPU backend.

MLX's CPU backend evaluates ``mx.fast.rms_norm`` and ``mx.fast.rope`` as their composed
fallbacks (10-25 graph nodes each) and every node costs several µs to evaluate, so a
decode step of a 30-layer model spent more time in graph evaluation than in the matmuls.
``patch.enable`` changes eligible instances to these subclasses; anything they do not
cover (other dtypes, array offsets of batched caches, long prefill blocks) calls the
parent class unchanged.

A fused block writes mlx-lm's plain and batched KV caches in float16 (``VLLM_MLX_NATIVE_KV``,
default ``f16``; ``f32`` keeps float32): those caches take the dtype of the first keys
written, and at a 2k-token context a decode step reads as many bytes of float32 cache as
of weights. The native attention kernels read half keys and values; every other reader
upcasts (``patch.py``).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import llama
from mlx_lm.models.cache import BatchKVCache, KVCache

from vllm_mlx import native
from vllm_mlx.protocols import AttentionCache

# Longer query blocks (prefill) are matmul-shaped: MLX's SDPA (BLAS) does them better.
MAX_NATIVE_QUERY = 8
KV_ENV = "VLLM_MLX_NATIVE_KV"  # "f16" (default) or "f32": the dtype of the native path's KV
_KV_DTYPES = {"f16": mx.float16, "f32": mx.float32}
# "invariant" (default): every prompt block runs the decode step's per-row arithmetic (int16
# products, the native attention), so a token's numbers never depend on the block, the
# cache or the batch it was computed in; "blas": long blocks dequantize for OpenBLAS's
# sgemm and run attention as BLAS matmuls (faster prefill, results depend on the split).
PREFILL_ENV = "VLLM_MLX_NATIVE_PREFILL"
_PREFILL_MODES = ("invariant", "blas")


_attending = threading.local()  # inside a routed model's attention (this thread)


@contextmanager
def routed_attention() -> Iterator[None]:
    """Calls of the wrapped ``scaled_dot_product_attention`` made in here are a routed
    model's (its attention layers and fused blocks): they go to the native kernels; any
    other model's go to MLX's op (`patch`)."""
    outer = attending_natively()
    _attending.routed = True
    try:
        yield
    finally:
        _attending.routed = outer


def attending_natively() -> bool:
    return getattr(_attending, "routed", False)


def blas_prefill() -> bool:
    """Whether long prompt blocks take the BLAS paths (``VLLM_MLX_NATIVE_PREFILL=blas``);
    read at run time, as ``kv_dtype`` is, so one process can compare both."""
    value = os.environ.get(PREFILL_ENV, "invariant")
    if value not in _PREFILL_MODES:
        raise ValueError(f"{PREFILL_ENV} must be invariant or blas, not {value!r}")
    return value == "blas"


def kv_dtype() -> mx.Dtype:
    """The dtype fused blocks write KV caches in (read at run time, as ``VLLM_MLX_NATIVE``
    is, so a test or benchmark can compare both in one process)."""
    value = os.environ.get(KV_ENV, "f16")
    if value not in _KV_DTYPES:
        raise ValueError(f"{KV_ENV} must be f16 or f32, not {value!r}")
    return _KV_DTYPES[value]


def kv_namespace(kernels: str) -> dict[str, str]:
    """What the prefix cache's disk namespace adds for float16 caches (``kernels``: the
    loaded model's ``LoadedModel.kernels``), so their files never serve a float32 server or
    back; nothing for float32, whose namespace stays what it was."""
    native = kernels.startswith("native")
    return {"native_kv": "f16"} if native and kv_dtype() == mx.float16 else {}


class HalfWrites:
    """mlx-lm's plain or batched KV cache whose ``update_and_fetch`` gets float16 keys and
    values, so the cache it allocates is float16; every other attribute is the cache's
    (mlx-lm's attention reads ``offset`` and checks for ``bits``)."""

    def __init__(self, cache: AttentionCache):
        self.cache = cache

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cache, name)

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        return self.cache.update_and_fetch(keys.astype(mx.float16), values.astype(mx.float16))


def _kv_writes(cache: AttentionCache | None) -> AttentionCache | None:
    """``cache`` as the block writes it: wrapped in ``HalfWrites`` for mlx-lm's exact
    ``KVCache`` / ``BatchKVCache`` when the KV dtype is float16, else itself (quantized
    and rotating caches keep their own dtype)."""
    if cache is not None and type(cache) in (KVCache, BatchKVCache) and kv_dtype() == mx.float16:
        return HalfWrites(cache)
    return cache


@functools.cache
def _inv_freq(dims: int, base: float) -> mx.array:
    freqs = native.rope_inv_freq(dims, base)
    mx.eval(freqs)
    return freqs


class NativeRMSNorm(nn.RMSNorm):
    """``nn.RMSNorm`` as one native node for float32 activations."""

    def __call__(self, x: mx.array) -> mx.array:
        weight = self["weight"]
        if x.dtype == mx.float32 and weight.dtype == mx.float32 and native.available():
            return native.rms_norm(x, weight, self.eps)
        return super().__call__(x)


class NativeRoPE(nn.RoPE):
    """``nn.RoPE`` as one native node for float32 ``[B, H, L, D]`` and an int offset or a
    batched cache's per-sequence int32 offsets ``[B]``."""

    def __call__(self, x: mx.array, offset: Any = 0) -> mx.array:
        if x.ndim == 4 and x.dtype == mx.float32 and self.dims % 2 == 0 and native.available():
            freqs = _inv_freq(self.dims, float(self.base))
            if type(offset) is int and offset >= 0:
                return native.rope(x, freqs, self.dims, self.traditional, self.scale, offset)
            if (
                isinstance(offset, mx.array)
                and offset.dtype == mx.int32
                and offset.shape == (x.shape[0],)
            ):
                return native.rope_offsets(
                    x, freqs, offset, self.dims, self.traditional, self.scale
                )
        return super().__call__(x, offset)


def _triple(layer: Any) -> tuple[mx.array, mx.array, mx.array]:
    # dict lookups, not nn.Module.__getattr__: this runs ~10 times per layer per token
    return layer["weight"], layer["scales"], layer["biases"]


def _cache_offset(cache: AttentionCache | None) -> int | None:
    """The int position of a plain (unquantized, single-sequence) KV cache, else None."""
    if cache is None:
        return 0
    offset = getattr(cache, "offset", None)
    return offset if type(offset) is int and not hasattr(cache, "bits") else None


class RowAdapters(Protocol):
    """What the native blocks and decode step ask of a model's adapter rows
    (``models.lora.AdapterRows``, a layer above): whether this call's rows run adapters,
    and which of them update a block's layers."""

    @property
    def active(self) -> bool: ...

    def touches(self, block: Any) -> bool: ...

    def rows_updating(self, layers: Sequence[Any], batch: int) -> mx.array | None: ...


@dataclass(frozen=True)
class BlockShape:
    """What a fused block needs besides its weights; fixed when the block is routed
    (a plain object, so nn.Module does not take its array for a parameter)."""

    mlp_quant: tuple[int, int]  # group size, bits of gate/up/down
    attention_quant: tuple[int, int] | None  # of q/k/v; None: the attention is unfused
    heads: tuple[int, int] = (0, 0)
    inv_freq: mx.array | None = None
    rope: tuple[int, bool, float] = (0, False, 1.0)
    scale: float = 1.0


def route_block(block: Any, max_rows: int | None, fused_attention: bool) -> None:
    """Make a ``llama.TransformerBlock`` a ``NativeLlamaBlock`` (``patch.enable`` checked
    that its projections are eligible; ``fused_attention``: the attention input too)."""
    attn, mlp = block.self_attn, block.mlp
    rope = attn.rope
    block.max_rows = max_rows
    block.shape = BlockShape(
        mlp_quant=(mlp.gate_proj.group_size, mlp.gate_proj.bits),
        attention_quant=(attn.q_proj.group_size, attn.q_proj.bits) if fused_attention else None,
        heads=(int(attn.n_heads), int(attn.n_kv_heads)),
        inv_freq=_inv_freq(rope.dims, float(rope.base)) if fused_attention else None,
        rope=(rope.dims, rope.traditional, rope.scale) if fused_attention else (0, False, 1.0),
        scale=attn.scale,
    )
    block.__class__ = NativeLlamaBlock


class NativeLlamaBlock(llama.TransformerBlock):
    """mlx-lm's Llama block as a few native nodes: the attention's input half (norm,
    q/k/v, heads, RoPE) is one, the MLP half (norm, gate, up, SwiGLU, down, residual)
    another. ``patch.enable`` gives it only to blocks whose projections are eligible
    quantized layers of one group size and bit width without biases."""

    max_rows: int | None = None  # longer blocks (prefill) use the unfused layers
    shape: BlockShape
    adapter_rows: RowAdapters | None = None  # touching it, its projections add terms

    def __call__(
        self, x: mx.array, mask: Any = None, cache: AttentionCache | None = None
    ) -> mx.array:
        if x.dtype != mx.float32 or not native.available():
            return super().__call__(x, mask, cache)
        cache = _kv_writes(cache)
        long_block = self.max_rows is not None and x.size > self.max_rows * x.shape[-1]
        if long_block and blas_prefill():
            return super().__call__(x, mask, cache)
        if self.adapter_rows is not None and self.adapter_rows.touches(self):
            return self._adapted(x, mask, cache)
        shape = self.shape
        offset = _cache_offset(cache)
        if (
            shape.attention_quant is not None
            and offset is not None
            and x.ndim == 3
            and (mask is None or isinstance(mask, str))
        ):
            h = x + self._attention(x, mask, cache, offset)
        else:
            h = x + self["self_attn"](self["input_layernorm"](x), mask, cache)
        return self._mlp_block(h)

    def _mlp_block(self, h: mx.array) -> mx.array:
        """``h + mlp(post_attention_layernorm(h))`` as one native node."""
        mlp, norm = self["mlp"], self["post_attention_layernorm"]
        return native.mlp_block(
            h,
            norm["weight"],
            norm.eps,
            _triple(mlp["gate_proj"]),
            _triple(mlp["up_proj"]),
            _triple(mlp["down_proj"]),
            *self.shape.mlp_quant,
        )

    def _adapted(self, x: mx.array, mask: Any, cache: AttentionCache | None) -> mx.array:
        """A call in which some rows' adapters update this block: mlx-lm's attention half
        (its native layers give the fused half's bits), and the fused MLP half for every
        row whose adapter leaves the MLP alone, so a row's numbers never depend on what
        its neighbours run under."""
        assert self.adapter_rows is not None  # __call__ checked
        h = x + self["self_attn"](self["input_layernorm"](x), mask, cache)
        fused = self._mlp_block(h)
        mlp = self["mlp"]
        rows = self.adapter_rows.rows_updating(
            [mlp["gate_proj"], mlp["up_proj"], mlp["down_proj"]], h.shape[0]
        )
        if rows is None:
            return fused
        adapted = h + mlp(self["post_attention_layernorm"](h))
        return mx.where(rows.reshape(-1, *[1] * (h.ndim - 1)), adapted, fused)

    def _attention(
        self, x: mx.array, mask: Any, cache: AttentionCache | None, offset: int
    ) -> mx.array:
        """``self_attn(input_layernorm(x), mask, cache)`` of mlx-lm's Llama ``Attention``."""
        attn, norm, shape = self["self_attn"], self["input_layernorm"], self.shape
        assert shape.attention_quant is not None and shape.inv_freq is not None
        queries, keys, values = native.attention_input(
            x,
            norm["weight"],
            norm.eps,
            _triple(attn["q_proj"]),
            _triple(attn["k_proj"]),
            _triple(attn["v_proj"]),
            *shape.attention_quant,
            shape.heads,
            shape.inv_freq,
            shape.rope,
            offset,
        )
        if cache is not None:
            keys, values = cache.update_and_fetch(keys, values)
        B, L, _ = x.shape
        if L <= MAX_NATIVE_QUERY or not blas_prefill():  # no mask array here: the kernel
            output = native.attention(queries, keys, values, shape.scale, mask == "causal")
        else:
            with routed_attention():
                output = llama.scaled_dot_product_attention(
                    queries, keys, values, cache=cache, scale=shape.scale, mask=mask
                )
        return attn["o_proj"](output.transpose(0, 2, 1, 3).reshape(B, L, -1))
