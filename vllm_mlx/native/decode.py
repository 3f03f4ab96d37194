"""A Llama model's whole decode step as one native node (plus one small write per cache).

With every layer fused (``layers.NativeLlamaBlock``) a decode step still built ~370 graph
nodes and spent ~4 ms in Python per token next to ~13 ms of weight reads. For one new
token per sequence on mlx-lm's plain or batched KV cache, ``NativeLlamaModel`` runs all
layers in ``native.decode_layers`` and puts each layer's new key/value row in its cache
with ``native.kv_write`` (in place when MLX may donate the buffer, as its own slice
update does). The caches are float32 or float16 (``layers.kv_dtype``: the fused blocks
write a prompt's keys and values as float16), every layer's of one dtype; the new rows
come out in that dtype. Anything else — prompt blocks, other caches, a cache that must grow this
step, sliding-window layers — calls mlx-lm's ``LlamaModel`` unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
from mlx_lm.models import llama
from mlx_lm.models.cache import BatchKVCache, KVCache

from vllm_mlx import native
from vllm_mlx.native import heap
from vllm_mlx.native.layers import BlockShape, NativeLlamaBlock, RowAdapters
from vllm_mlx.protocols import LayerCache


@dataclass(frozen=True)
class StackShape:
    """What every layer of the stack shares (checked once, when the model is routed)."""

    eps: float
    layer: BlockShape  # every layer's, with the attention input fused


def stack_shape(model: Any) -> StackShape | None:
    """The shared shape of ``model``'s layers (an mlx-lm ``LlamaModel``), or None when a
    layer is not fully fused or the layers differ (then the model is not routed)."""
    layers = list(getattr(model, "layers", []))
    if not layers or getattr(model, "swa_idx", None) is not None:
        return None
    if not all(type(b) is NativeLlamaBlock and b.shape.attention_quant for b in layers):
        return None
    first = layers[0].shape
    eps = {n.eps for b in layers for n in (b.input_layernorm, b.post_attention_layernorm)}
    # BlockShape holds an array, so compare it field by field: inv_freq is cached per
    # (dims, base), so one object means one base
    same = all(
        b.shape.inv_freq is first.inv_freq
        and (b.shape.attention_quant, b.shape.mlp_quant, b.shape.heads, b.shape.rope, b.shape.scale)
        == (first.attention_quant, first.mlp_quant, first.heads, first.rope, first.scale)
        for b in layers
    )
    return StackShape(eps=float(eps.pop()), layer=first) if same and len(eps) == 1 else None


class _Pending:
    """The last decode step's new rows, the prompt tokens run since the last decode step,
    and the stack's weights as the decode node holds them, gathered and checked at the
    first step (a plain object: nn.Module would take an array attribute for a parameter)."""

    rows: mx.array | None = None
    prompt_tokens: int = 0
    weights: Any = None


def route_model(model: Any, shape: StackShape) -> None:
    """Make an mlx-lm ``LlamaModel`` (all of whose layers are fused) a ``NativeLlamaModel``."""
    model.stack = shape
    model.pending = _Pending()
    model.__class__ = NativeLlamaModel


def layer_weights(block: Any) -> list[mx.array]:
    """The 23 arrays of one layer in ``native.decode_layers``' order (dict lookups: this
    runs for every layer on every token)."""
    attn, mlp = block["self_attn"], block["mlp"]
    out = [block["input_layernorm"]["weight"]]
    for proj in (attn["q_proj"], attn["k_proj"], attn["v_proj"], attn["o_proj"]):
        out += (proj["weight"], proj["scales"], proj["biases"])
    out.append(block["post_attention_layernorm"]["weight"])
    for proj in (mlp["gate_proj"], mlp["up_proj"], mlp["down_proj"]):
        out += (proj["weight"], proj["scales"], proj["biases"])
    return out


@dataclass(frozen=True)
class _Position:
    write_index: int
    positions: mx.array  # int32 [B]: RoPE position of the new token
    key_start: mx.array  # int32 [B]: first cache row each sequence sees
    batched: bool


def _position(cache: list[Any], batch: int) -> _Position | None:
    """Where the new token goes in ``cache`` (one per layer), or None when the step is not
    one the native node covers: other cache types, unequal layers, a cache that grows."""
    first = cache[0]
    kind = type(first)
    if kind not in (KVCache, BatchKVCache) or first.keys is None:
        return None
    dtype = first.keys.dtype
    if dtype not in (mx.float32, mx.float16):
        return None
    index = first.offset if kind is KVCache else first._idx
    capacity = first.keys.shape[2]
    for c in cache:
        if (
            type(c) is not kind
            or c.keys is None
            or c.keys.dtype != dtype
            or c.values.dtype != dtype
            or c.keys.shape[0] != batch
            or c.keys.shape[2] != capacity
            or (c.offset if kind is KVCache else c._idx) != index
        ):
            return None
    if type(index) is not int or index >= capacity:
        return None  # the cache grows this step: mlx-lm's path does that
    if kind is KVCache:
        return _Position(
            index, mx.full((batch,), index, mx.int32), mx.zeros((batch,), mx.int32), False
        )
    if first._right_padding is not None or first.offset.dtype != mx.int32:
        return None
    return _Position(index, first.offset, first.left_padding.astype(mx.int32), True)


class NativeLlamaModel(llama.LlamaModel):
    """mlx-lm's ``LlamaModel`` whose one-token decode steps run as one native node."""

    stack: StackShape
    pending: _Pending
    adapter_rows: RowAdapters | None = None  # active: the blocks run unfused

    def __call__(
        self,
        inputs: mx.array,
        cache: Sequence[LayerCache] | None = None,
        input_embeddings: mx.array | None = None,
    ) -> mx.array:
        if (
            input_embeddings is None
            and not (self.adapter_rows is not None and self.adapter_rows.active)
            and cache is not None
            and inputs.ndim == 2
            and inputs.shape[1] == 1
            and native.available()
            and len(cache) == len(self.layers)
        ):
            position = _position(list(cache), inputs.shape[0])
            if position is not None:
                h = self["embed_tokens"](inputs)
                if h.dtype == mx.float32:
                    return self._decode(h, list(cache), position)
        if cache is not None and inputs.ndim == 2:
            self.pending.prompt_tokens += inputs.shape[1]
        return super().__call__(inputs, cache, input_embeddings)

    def _decode(self, h: mx.array, cache: list[Any], at: _Position) -> mx.array:
        caches: list[mx.array] = []
        for c in cache:
            caches += (c.keys, c.values)
        shape = self.stack.layer
        assert shape.attention_quant is not None and shape.inv_freq is not None
        if self.pending.weights is None:  # the weights never change once routed
            arrays: list[mx.array] = []
            for block in self.layers:
                arrays += layer_weights(block)
            self.pending.weights = native.decode_weights(
                arrays, *shape.attention_quant, *shape.mlp_quant, *shape.heads
            )
        h, rows = native.decode_layers(
            h, self.pending.weights, caches, at.positions, at.key_start, shape.inv_freq,
            self.stack.eps,
            *shape.attention_quant, *shape.mlp_quant, *shape.heads, *shape.rope,
            shape.scale, at.write_index,
        )  # fmt: skip
        offset = at.positions + 1 if at.batched else None
        for layer, c in enumerate(cache):
            c.keys = native.kv_write(c.keys, rows, layer, 0, at.write_index)
            c.values = native.kv_write(c.values, rows, layer, 1, at.write_index)
            if at.batched:
                c.offset = offset
                c._idx += 1
            else:
                c.offset += 1
        # MLX lends kv_write a cache's buffer (no copy) only once nothing holds it, and
        # the step that last read it (the previous decode step, or the prompt) holds it
        # until it has run: wait for that step, now that this one is built (mlx-lm's loop
        # would wait for its token a moment later anyway), then start this one, whose
        # graph runs that step's writes first. Waiting for the writes too, then building
        # the output head and the draw, left the pool idle 0.5-1.3 ms a step.
        if self.pending.rows is not None:
            mx.eval(self.pending.rows)
        mx.async_eval(h, rows)
        self.pending.rows = rows
        if self.pending.prompt_tokens >= heap.TRIM_AFTER_TOKENS:
            mx.eval(caches)  # once the prompt has run, its freed blocks leave the process
            heap.trim()
        self.pending.prompt_tokens = 0
        return self["norm"](h)
