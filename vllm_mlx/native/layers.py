"""Layer classes whose per-token work runs as single native nodes on the CPU backend.

MLX's CPU backend evaluates ``mx.fast.rms_norm`` and ``mx.fast.rope`` as their composed
fallbacks (10-25 graph nodes each) and every node costs several µs to evaluate, so a
decode step of a 30-layer model spent more time in graph evaluation than in the matmuls.
``patch.enable`` changes eligible instances to these subclasses; anything they do not
cover (other dtypes, array offsets of batched caches, long prefill blocks) calls the
parent class unchanged.
"""

from __future__ import annotations

import functools
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import llama

from vllm_mlx import native


@functools.cache
def _inv_freq(dims: int, base: float) -> mx.array:
    freqs = native.rope_inv_freq(dims, base)
    mx.eval(freqs)
    return freqs


class NativeRMSNorm(nn.RMSNorm):
    """``nn.RMSNorm`` as one native node for float32 activations."""

    def __call__(self, x: mx.array) -> mx.array:
        if x.dtype == mx.float32 and native.available():
            return native.rms_norm(x, self["weight"], self.eps)
        return super().__call__(x)


class NativeRoPE(nn.RoPE):
    """``nn.RoPE`` as one native node for float32 ``[B, H, L, D]`` and an int offset."""

    def __call__(self, x: mx.array, offset: Any = 0) -> mx.array:
        if (
            type(offset) is int
            and x.ndim == 4
            and x.dtype == mx.float32
            and self.dims % 2 == 0
            and native.available()
        ):
            freqs = _inv_freq(self.dims, float(self.base))
            return native.rope(x, freqs, self.dims, self.traditional, self.scale, offset)
        return super().__call__(x, offset)


def _triple(layer: Any) -> tuple[mx.array, mx.array, mx.array]:
    return layer["weight"], layer["scales"], layer["biases"]


def _cache_offset(cache: Any) -> int | None:
    """The int position of a plain (unquantized, single-sequence) KV cache, else None."""
    if cache is None:
        return 0
    offset = getattr(cache, "offset", None)
    return offset if type(offset) is int and not hasattr(cache, "bits") else None


class NativeLlamaBlock(llama.TransformerBlock):
    """mlx-lm's Llama block as a few native nodes: the attention's input half (norm,
    q/k/v, heads, RoPE) is one, the MLP half (norm, gate, up, SwiGLU, down, residual)
    another. ``patch.enable`` gives it only to blocks whose projections are eligible
    quantized layers of one group size and bit width without biases."""

    max_rows: int | None = None  # longer blocks (prefill) use the unfused layers
    fused_attention = False  # the attention half too (plain nn.RoPE, no biases)

    def __call__(self, x: mx.array, mask: Any = None, cache: Any = None) -> mx.array:
        rows = x.size // x.shape[-1]
        if (
            x.dtype != mx.float32
            or (self.max_rows is not None and rows > self.max_rows)
            or not native.available()
        ):
            return super().__call__(x, mask, cache)
        offset = _cache_offset(cache)
        if (
            self.fused_attention
            and offset is not None
            and x.ndim == 3
            and (mask is None or isinstance(mask, str))
        ):
            h = x + self._attention(x, mask, cache, offset)
        else:
            h = x + self.self_attn(self.input_layernorm(x), mask, cache)
        mlp, norm = self.mlp, self.post_attention_layernorm
        return native.mlp_block(
            h,
            norm["weight"],
            norm.eps,
            _triple(mlp.gate_proj),
            _triple(mlp.up_proj),
            _triple(mlp.down_proj),
            mlp.gate_proj.group_size,
            mlp.gate_proj.bits,
        )

    def _attention(self, x: mx.array, mask: Any, cache: Any, offset: int) -> mx.array:
        """``self_attn(input_layernorm(x), mask, cache)`` of mlx-lm's Llama ``Attention``."""
        attn, norm = self.self_attn, self.input_layernorm
        rope = attn.rope
        queries, keys, values = native.attention_input(
            x,
            norm["weight"],
            norm.eps,
            _triple(attn.q_proj),
            _triple(attn.k_proj),
            _triple(attn.v_proj),
            attn.q_proj.group_size,
            attn.q_proj.bits,
            (attn.n_heads, attn.n_kv_heads),
            _inv_freq(rope.dims, float(rope.base)),
            (rope.dims, rope.traditional, rope.scale),
            offset,
        )
        if cache is not None:
            keys, values = cache.update_and_fetch(keys, values)
        # the module's (patched) function: the native kernel for short query blocks
        output = llama.scaled_dot_product_attention(
            queries, keys, values, cache=cache, scale=attn.scale, mask=mask
        )
        B, L, _ = x.shape
        return attn.o_proj(output.transpose(0, 2, 1, 3).reshape(B, L, -1))
