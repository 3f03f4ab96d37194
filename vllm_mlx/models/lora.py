"""Several adapters on one base model at once, chosen per row of a batch.

The base weights are never changed. Each linear layer some loaded adapter targets changes
class (as ``native.patch`` does) to a subclass that runs the base layer and then adds, for
the rows of the batch whose sequence uses adapter *i*, ``scale_i · (x @ A_i) @ B_i`` (and
DoRA's per-output rescale). Which row uses which adapter is one per-model ``AdapterRows``
the batch source sets before each model call; with no adapter row in a step nothing is
added, and the native fused blocks and one-node decode step run as without adapters. In a
step with adapter rows the blocks those adapters target run mlx-lm's own layers (the fused
kernels do not see the low-rank terms) and the others stay fused, so only the layers that
need the adapters pay for them.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import llama

from vllm_mlx.models.adapters import AdapterWeights, LowRank, dense_weight


class AdapterRows:
    """Which adapter slot each row of the current model call uses (0: the base).

    Read by every routed layer and by the native blocks (``active``), set by the batch
    source around each model call."""

    def __init__(self) -> None:
        self.plan: list[tuple[int, mx.array]] = []  # (slot, row indices) for this call
        self._slots: frozenset[int] = frozenset()  # the slots of this call's rows
        self._row_slots: list[int] = []  # each row's slot, in row order

    @property
    def active(self) -> bool:
        return bool(self.plan)

    def touches(self, block: Any) -> bool:
        """Whether an adapter of this call updates one of ``block``'s layers (a block no
        such adapter targets keeps its fused kernels)."""
        targeted = block.__dict__.get("adapter_slots")
        return bool(self.plan) and targeted is not None and not self._slots.isdisjoint(targeted)

    def rows_updating(self, layers: Sequence[Any], batch: int) -> mx.array | None:
        """A bool ``[batch]`` marking the rows whose adapter updates one of ``layers`` (the
        rest keep the base layers' fused kernels); None when no row's does."""
        updated = {slot for slot in self._slots if any(slot in _slots_of(x) for x in layers)}
        marked = [slot in updated for slot in self._row_slots]
        assert len(marked) == batch, "the rows set for this call are another call's"
        return mx.array(marked) if any(marked) else None

    def set_rows(self, slots: Sequence[int] | None) -> None:
        self.plan = []
        self._row_slots = list(slots or ())
        self._slots = frozenset(self._row_slots) - {0}
        for slot in sorted(self._slots):
            rows = [i for i, s in enumerate(slots or ()) if s == slot]
            self.plan.append((slot, mx.array(rows, dtype=mx.int32)))


def _slots_of(layer: Any) -> dict[int, Any]:
    """The slots whose low-rank updates a layer adds (none for a layer no adapter targets)."""
    updates = layer.__dict__.get("adapter_updates")
    return updates.by_slot if updates is not None else {}


class _Updates:
    """A routed layer's low-rank updates by slot (a plain object: not parameters)."""

    def __init__(self, rows: AdapterRows) -> None:
        self.rows = rows
        self.by_slot: dict[int, LowRank] = {}


def _routed_call(self: Any, x: mx.array) -> mx.array:
    base = type(self).__mro__[1]
    y = base.__call__(self, x)
    updates: _Updates = self.adapter_updates
    for slot, rows in updates.rows.plan:
        update = updates.by_slot.get(slot)
        if update is None:
            continue
        xs = x[rows]
        delta = (update.scale * ((xs @ update.a) @ update.b)).astype(y.dtype)
        if update.magnitude is None:
            y = y.at[rows].add(delta)
            continue
        bias = self["bias"] if "bias" in self else None
        plain = y[rows] if bias is None else y[rows] - bias
        adapted = update.magnitude.astype(y.dtype) * (plain + delta)
        y = y.at[rows].add(adapted - plain)
    return y


_ROUTED: dict[type, type] = {}


def _routed_class(cls: type) -> type:
    if cls not in _ROUTED:
        _ROUTED[cls] = type(f"Adapted{cls.__name__}", (cls,), {"__call__": _routed_call})
    return _ROUTED[cls]


class ModelAdapters:
    """The adapters installed on one base model, by slot."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.rows = AdapterRows()
        self._modules = dict(model.named_modules())
        self._slots: dict[int, list[str]] = {}  # slot -> the module paths it updates
        self._next_slot = 1
        self._lock = threading.Lock()
        self._blocks = {  # module path prefix -> the block it is in
            path: module
            for path, module in self._modules.items()
            if isinstance(module, llama.TransformerBlock)
        }
        for _, module in self._modules.items():
            if isinstance(module, llama.TransformerBlock | llama.LlamaModel):
                module.adapter_rows = self.rows  # native blocks step aside when touched

    def install(self, weights: AdapterWeights) -> int:
        """Add ``weights`` under a new slot (never reused: a stale slot adds nothing)."""
        with self._lock:
            slot, self._next_slot = self._next_slot, self._next_slot + 1
            for path, update in weights.layers.items():
                layer = self._modules[path]
                if "adapter_updates" not in layer.__dict__:
                    layer.adapter_updates = _Updates(self.rows)
                    layer.__class__ = _routed_class(type(layer))
                layer.adapter_updates.by_slot[slot] = update
                block = self._block_of(path)
                if block is not None:
                    block.adapter_slots = block.__dict__.get("adapter_slots", set()) | {slot}
            self._slots[slot] = list(weights.layers)
            return slot

    def _block_of(self, path: str) -> Any:
        return next((b for p, b in self._blocks.items() if path.startswith(p + ".")), None)

    def uninstall(self, slot: int) -> None:
        """Drop a slot no running sequence uses."""
        with self._lock:
            for path in self._slots.pop(slot, []):
                self._modules[path].adapter_updates.by_slot.pop(slot, None)
                block = self._block_of(path)
                if block is not None:
                    block.adapter_slots = block.__dict__.get("adapter_slots", set()) - {slot}

    @property
    def slots(self) -> list[int]:
        return sorted(self._slots)


def model_adapters(model: nn.Module) -> ModelAdapters:
    """The model's adapter table, made on first use."""
    table = model.__dict__.get("served_adapters")
    if table is None:
        table = ModelAdapters(model)
        model.served_adapters = table
    return table


def fuse_adapter(model: nn.Module, weights: AdapterWeights) -> None:
    """Merge ``weights`` into ``model``'s own layers (``--adapter-fuse``: a separate copy
    of the base served as its own model; never the shared base). A quantized layer is
    dequantized, updated and quantized again in its own group size and bits, as
    ``mlx_lm.fuse`` does, so it keeps its kernels (the native ones on a CPU)."""
    modules = dict(model.named_modules())
    fused: list[mx.array] = []
    for path, update in weights.layers.items():
        layer = modules[path]
        quantized = isinstance(layer, nn.QuantizedLinear)
        weight = dense_weight(layer)
        weight = weight + (update.scale * update.b.T) @ update.a.T
        if update.magnitude is not None:
            weight = update.magnitude[:, None] * weight
        if quantized:
            packed, scales, biases = mx.quantize(
                weight, group_size=layer.group_size, bits=layer.bits, mode=layer.mode
            )
            layer.weight, layer.scales, layer.biases = packed, scales, biases
            fused += [packed, scales, biases]
        else:
            layer.weight = weight.astype(layer.weight.dtype)
            fused.append(layer.weight)
    mx.eval(fused)
