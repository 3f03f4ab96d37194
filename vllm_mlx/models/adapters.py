"""mlx-lm's adapter folders, read and checked against the base model they are served on.

``mlx_lm.lora`` writes ``adapters.safetensors`` (``<module path>.lora_a`` ``[in, rank]``,
``.lora_b`` ``[rank, out]`` and, for DoRA, ``.m`` ``[out]``) beside ``adapter_config.json``
(``fine_tune_type``, ``num_layers``, ``lora_parameters``: ``rank``, ``scale``, optional
``keys``). Everything in the folder is checked before a single weight reaches the model:
a wrong base, rank, layer or module is refused with the mismatch named, where mlx-lm's
own ``strict=False`` load would leave the missing layers silently untrained.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from vllm_mlx.models.errors import ModelLoadError

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapters.safetensors"
TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")
_LEAVES = ("lora_a", "lora_b", "m")
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


class AdapterError(ModelLoadError):
    """An adapter that cannot be served on the base it was asked for."""


@dataclass
class LowRank:
    """One targeted linear layer's update: ``y += scale · (x @ a) @ b``; with DoRA the
    sum is then scaled per output by ``magnitude`` (``m / ‖W + scale·bᵀaᵀ‖``)."""

    a: mx.array  # [in, rank]
    b: mx.array  # [rank, out]
    scale: float
    magnitude: mx.array | None = None  # [out], DoRA only


@dataclass
class AdapterWeights:
    """An adapter checked against its base: the low-rank update of each targeted layer."""

    path: Path
    kind: str  # "lora" or "dora"
    rank: int
    layers: dict[str, LowRank]  # module path in the base -> its update
    digest: str  # hash of the files: the prefix cache's key for this adapter's KV
    chat_template: str | None = None  # the folder's own template, if it has one

    @property
    def nbytes(self) -> int:
        arrays = [x for u in self.layers.values() for x in (u.a, u.b, u.magnitude) if x is not None]
        return sum(int(x.nbytes) for x in arrays)


def is_adapter_folder(path: Path) -> bool:
    return (path / CONFIG_FILE).is_file() and (path / WEIGHTS_FILE).is_file()


def read_adapter(path: str | Path, model: nn.Module, name: str = "adapter") -> AdapterWeights:
    """The adapter in folder ``path`` as updates of ``model``'s layers (AdapterError naming
    the file, tensor or field at fault)."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise AdapterError(f"adapter {name!r}: {folder} is not a folder")
    if not is_adapter_folder(folder):
        raise AdapterError(
            f"adapter {name!r}: {folder} has no {CONFIG_FILE} and {WEIGHTS_FILE} "
            "(the folder mlx_lm.lora writes)"
        )
    config = _config(folder, name)
    kind = config.get("fine_tune_type", "lora")
    if kind not in ("lora", "dora"):
        raise AdapterError(
            f"adapter {name!r}: fine_tune_type {kind!r} is not an adapter "
            "(only lora and dora are; a full fine-tune is a model: serve it as one)"
        )
    params = config.get("lora_parameters")
    if not isinstance(params, dict):
        raise AdapterError(f"adapter {name!r}: {CONFIG_FILE} has no lora_parameters table")
    rank, scale = params.get("rank"), params.get("scale")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise AdapterError(f"adapter {name!r}: lora_parameters.rank must be a positive integer")
    if not isinstance(scale, int | float) or isinstance(scale, bool):
        raise AdapterError(f"adapter {name!r}: lora_parameters.scale must be a number")
    try:
        tensors = mx.load(str(folder / WEIGHTS_FILE))
    except (OSError, RuntimeError, ValueError) as exc:
        raise AdapterError(f"adapter {name!r}: cannot read {WEIGHTS_FILE}: {exc}") from None
    assert isinstance(tensors, dict)
    layers = _updates(tensors, model, config, rank, float(scale), kind, name)
    return AdapterWeights(
        path=folder,
        kind=kind,
        rank=rank,
        layers=layers,
        digest=_digest(folder),
        chat_template=_template(folder),
    )


def _config(folder: Path, name: str) -> dict[str, Any]:
    try:
        config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AdapterError(f"adapter {name!r}: {CONFIG_FILE}: {exc}") from None
    if not isinstance(config, dict):
        raise AdapterError(f"adapter {name!r}: {CONFIG_FILE} is not a JSON object")
    return config


def _updates(
    tensors: dict[str, mx.array],
    model: nn.Module,
    config: dict[str, Any],
    rank: int,
    scale: float,
    kind: str,
    name: str,
) -> dict[str, LowRank]:
    """Each tensor matched to a linear layer of ``model``, shapes and layers checked."""
    modules = dict(model.named_modules())
    num_layers = _layer_count(model)
    first = _first_layer(config.get("num_layers"), num_layers, name)
    keys = (config.get("lora_parameters") or {}).get("keys")
    grouped: dict[str, dict[str, mx.array]] = {}
    for key, value in tensors.items():
        module_path, _, leaf = key.rpartition(".")
        if leaf not in _LEAVES or not module_path:
            raise AdapterError(f"adapter {name!r}: {key} is not a LoRA tensor (lora_a, lora_b, m)")
        grouped.setdefault(module_path, {})[leaf] = value
    if not grouped:
        raise AdapterError(f"adapter {name!r}: {WEIGHTS_FILE} holds no LoRA tensors")
    updates = {}
    for module_path, leaves in sorted(grouped.items()):
        layer = modules.get(module_path)
        where = f"adapter {name!r}: {module_path}"
        if layer is None:
            raise AdapterError(f"{where}: the base model has no such layer")
        if not isinstance(layer, nn.Linear | nn.QuantizedLinear):
            raise AdapterError(
                f"{where}: a {type(layer).__name__} (only Linear and QuantizedLinear layers "
                "take adapters here)"
            )
        if (match := _LAYER.search(module_path + ".")) and first is not None:
            index = int(match.group(1))
            if index >= num_layers or index < first:
                raise AdapterError(
                    f"{where}: layer {index} is outside the last {config.get('num_layers')} "
                    f"of the base's {num_layers} layers that adapter_config.json names"
                )
        if isinstance(keys, list) and not any(module_path.endswith(k) for k in keys):
            raise AdapterError(f"{where}: not one of lora_parameters.keys {keys}")
        updates[module_path] = _low_rank(layer, leaves, rank, scale, kind, where)
    return updates


def _low_rank(
    layer: Any, leaves: dict[str, mx.array], rank: int, scale: float, kind: str, where: str
) -> LowRank:
    out_dims, in_dims = _dims(layer)
    a, b = leaves.get("lora_a"), leaves.get("lora_b")
    if a is None or b is None:
        raise AdapterError(f"{where}: needs both lora_a and lora_b")
    if a.ndim != 2 or a.shape[1] != rank or b.ndim != 2 or b.shape[0] != rank:
        raise AdapterError(
            f"{where}: lora_a {tuple(a.shape)} and lora_b {tuple(b.shape)} are not of "
            f"rank {rank} (adapter_config.json)"
        )
    if a.shape[0] != in_dims or b.shape[1] != out_dims:
        raise AdapterError(
            f"{where}: the adapter maps {a.shape[0]} -> {b.shape[1]} features, the base "
            f"layer {in_dims} -> {out_dims}: trained on another base model"
        )
    a, b = a.astype(mx.float32), b.astype(mx.float32)
    magnitude = None
    if kind == "dora":
        weight = dense_weight(layer)
        m = leaves.get("m")
        if m is None:  # mlx-lm starts m at the base's row norms
            m = mx.linalg.norm(weight, axis=1)
        if m.shape != (out_dims,):
            raise AdapterError(f"{where}: m has shape {tuple(m.shape)}, expected ({out_dims},)")
        adapted = weight + (scale * b.T) @ a.T
        magnitude = m.astype(mx.float32) / mx.linalg.norm(adapted, axis=1)
    elif "m" in leaves:
        raise AdapterError(f"{where}: an m tensor in a {kind} adapter (DoRA's: fine_tune_type)")
    update = LowRank(a, b, scale, magnitude)
    mx.eval([x for x in (update.a, update.b, update.magnitude) if x is not None])
    return update


def _dims(layer: Any) -> tuple[int, int]:
    out_dims, in_dims = layer.weight.shape
    if isinstance(layer, nn.QuantizedLinear):
        in_dims = in_dims * 32 // layer.bits
    return int(out_dims), int(in_dims)


def dense_weight(layer: Any) -> mx.array:
    """A linear layer's weight as float32 ``[out, in]`` (dequantized if it is quantized)."""
    if not isinstance(layer, nn.QuantizedLinear):
        return layer.weight.astype(mx.float32)
    return mx.dequantize(
        layer.weight,
        layer.scales.astype(mx.float32),
        layer.biases.astype(mx.float32) if layer.biases is not None else None,
        group_size=layer.group_size,
        bits=layer.bits,
        mode=layer.mode,
    )


def _layer_count(model: nn.Module) -> int:
    layers = getattr(model, "layers", None)
    return len(layers) if isinstance(layers, list) else 0


def _first_layer(num_layers: Any, count: int, name: str) -> int | None:
    """The first block index the config's ``num_layers`` covers (mlx-lm trains the last
    ones; -1 means all)."""
    if num_layers is None:
        return None
    if not isinstance(num_layers, int) or isinstance(num_layers, bool):
        raise AdapterError(f"adapter {name!r}: num_layers must be an integer")
    if num_layers > count:
        raise AdapterError(
            f"adapter {name!r}: adapter_config.json names num_layers {num_layers}, the base "
            f"model has {count} layers: trained on another base model"
        )
    return 0 if num_layers < 0 else count - num_layers


def _digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for file in (CONFIG_FILE, WEIGHTS_FILE):
        with open(folder / file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:24]


def _template(folder: Path) -> str | None:
    """A chat template the adapter folder carries (then it replaces the base's)."""
    for file in TEMPLATE_FILES:
        path = folder / file
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        if file.endswith(".json"):
            value = json.loads(text).get("chat_template")
            return value if isinstance(value, str) else None
        return text
    config = folder / "tokenizer_config.json"
    if config.is_file():
        value = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
        return value if isinstance(value, str) else None
    return None
