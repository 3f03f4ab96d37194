"""Which models' products run on packed weight copies (``VLLM_MLX_NATIVE_PACKED``).

The packed copy (``csrc/packed_weights.cpp``) sits beside MLX's arrays, so it doubles a
model's quantized weight memory; it makes each extra row of a batched decode step's
products ≈3.5x cheaper. ``auto`` (the default) gives it to a model whose routed
quantized weights fit ``budget_bytes()`` (2 GiB and 10% of physical memory), decided
once when the model is routed, for all of its routed layers or none: every row of every
request on a model runs the same product body for the model's life. ``1`` packs every
product's weights, ``0`` none. A copy is freed with its weights.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterable
from typing import Any

from vllm_mlx import native

ENV = "VLLM_MLX_NATIVE_PACKED"
MODES = ("auto", "1", "0")
BITS = (4, 8)  # the weights the native products take
GROUP_SIZES = (32, 64, 128)
BUDGET_CAP = 2 << 30  # bytes
BUDGET_SHARE = 0.10  # of physical memory
_packed: dict[int, int] = {}  # id(model) -> its packed bytes, while the model lives


def check_env() -> None:
    """A bad ``VLLM_MLX_NATIVE_PACKED`` fails the model load (the extension reads it
    itself, and would take any other value for auto)."""
    value = os.environ.get(ENV, "auto")
    if value not in MODES:
        raise ValueError(f"{ENV} must be auto, 1 or 0, not {value!r}")


def physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def budget_bytes() -> int:
    """The most packed bytes ``auto`` gives one model."""
    return min(BUDGET_CAP, int(BUDGET_SHARE * physical_memory()))


def tile_bytes(rows: int, k: int, bits: int, group_size: int, scale_bytes: int) -> int:
    """Bytes of a packed copy of ``rows`` x ``k`` weights (rows padded to tiles of 16, as
    the C++ packs, with their scales and biases)."""
    tiles = (rows + 15) // 16
    entries = tiles * 16 * (k // group_size)
    return tiles * 16 * k * bits // 8 + 2 * entries * scale_bytes


def copy_bytes(layer: Any) -> int:
    """Bytes of one layer's packed copy."""
    n, words = layer["weight"].shape
    k = words * 32 // layer.bits
    return tile_bytes(n, k, layer.bits, layer.group_size, layer["scales"].itemsize)


def packs(total: int) -> bool:
    """Whether a model whose routed products' copies take ``total`` bytes gets them: the
    mode is not ``0``, the packed body can read them (the VNNI int16 body, int16
    activations), and under ``auto`` they fit the budget."""
    mode = native.packed_mode()
    reads = native.int16_body() == "vnni" and native.status()["activations"] != "float"
    return total > 0 and mode != "0" and reads and (mode == "1" or total <= budget_bytes())


def pack_model(model: Any, layers: Iterable[Any]) -> int:
    """Register ``layers`` (``model``'s routed quantized products) for packed copies
    when the mode is auto, they fit the budget and the packed body can read them (the
    VNNI int16 body, int16 activations); the bytes their copies take (0: none; under "1"
    the copies every product makes)."""
    layers = list(layers)
    total = sum(copy_bytes(layer) for layer in layers)
    if not packs(total):
        return 0
    if native.packed_mode() == "auto":  # "1": every product packs its weights itself
        import mlx.core as mx

        mx.eval([(layer["weight"], layer["scales"], layer["biases"]) for layer in layers])
        for layer in layers:
            native.register_packed(
                layer["weight"], layer["scales"], layer["biases"], layer.group_size, layer.bits
            )
    _packed[id(model)] = total
    weakref.finalize(model, _packed.pop, id(model), None)
    return total


def packed_bytes(model: Any) -> int:
    """The packed bytes ``pack_model`` gave ``model`` (filled by their first products),
    for the pool's memory accounting."""
    return _packed.get(id(model), 0) if model is not None else 0
