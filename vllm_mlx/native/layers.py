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


class NativeLlamaBlock(llama.TransformerBlock):
    """mlx-lm's Llama block whose MLP half (norm, gate, up, SwiGLU, down, residual) is
    one native node; only given to blocks whose three MLP projections are eligible
    quantized layers of one group size and bit width (``patch.enable`` checks)."""

    max_rows: int | None = None  # longer blocks (prefill) use the unfused layers

    def __call__(self, x: mx.array, mask: Any = None, cache: Any = None) -> mx.array:
        h = x + self.self_attn(self.input_layernorm(x), mask, cache)
        rows = h.size // h.shape[-1]
        if (
            h.dtype != mx.float32
            or (self.max_rows is not None and rows > self.max_rows)
            or not native.available()
        ):
            return h + self.mlp(self.post_attention_layernorm(h))
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
