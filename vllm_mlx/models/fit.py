"""Will the model fit? Weights (from the safetensors headers, as they will be held after
loading) plus the KV cache of one full context (from the config) against the memory MLX can
use: Metal's recommended working set on a Mac, available RAM elsewhere. A start that would
not fit is refused with the numbers, or its context capped to what fits (and said so),
before any weight is read."""

from __future__ import annotations

import json
import logging
import math
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from vllm_mlx import native
from vllm_mlx.models.errors import ModelLoadError
from vllm_mlx.models.hub import remote_facts
from vllm_mlx.models.loader import CpuWeights, choose_weights, computes_on_cpu, context_length
from vllm_mlx.models.mtp_heads import carried, copies_of_main, head_prefix, main_copies
from vllm_mlx.models.names import parse_hub_ref
from vllm_mlx.models.resolve import is_model_name, model_by_name, resolve_model
from vllm_mlx.native import packing

log = logging.getLogger(__name__)

MEMORY_ENV = "VLLM_MLX_MEMORY_GB"  # the memory the check counts as usable, instead of measuring
MIN_CONTEXT = 512  # a context shorter than this is not worth serving: refuse instead
CONTEXT_STEP = 256
RUNTIME_OVERHEAD = 256 << 20  # activations, the tokenizer, Python and the libraries
_DTYPE_BYTES = {
    "F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2,
    "I16": 2, "U16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1,
}  # fmt: skip


@dataclass(frozen=True)
class Estimate:
    """The memory a model needs to serve ``context`` tokens, and what there is."""

    weights: int  # bytes, as held after loading
    kv_per_token: int  # bytes of KV cache per token of context
    context: int  # the context counted
    prefix_cache: int  # bytes the prefix cache may hold
    available: int | None  # bytes MLX can use (None: unknown, nothing is checked)
    available_from: str  # where ``available`` comes from

    @property
    def needed(self) -> int:
        return (
            self.weights + self.kv_per_token * self.context + self.prefix_cache + RUNTIME_OVERHEAD
        )

    def fitting_context(self) -> int:
        """The longest context (a multiple of CONTEXT_STEP) that fits; 0 when none does."""
        if self.available is None:
            return self.context
        room = self.available - self.weights - self.prefix_cache - RUNTIME_OVERHEAD
        if room <= 0 or self.kv_per_token <= 0:
            return self.context if room > 0 else 0
        return min(self.context, room // self.kv_per_token // CONTEXT_STEP * CONTEXT_STEP)

    def describe(self) -> str:
        kv = self.kv_per_token * self.context
        lines = [
            f"weights       {gb(self.weights)}",
            f"KV cache      {gb(kv)}  ({self.context} tokens x {self.kv_per_token / 1024:.1f} KB)",
            f"prefix cache  {gb(self.prefix_cache)}  (--prefix-cache-mb)",
            f"runtime       {gb(RUNTIME_OVERHEAD)}",
            f"needed        {gb(self.needed)}",
        ]
        if self.available is None:
            lines.append("available     unknown (nothing checked)")
        else:
            lines.append(f"available     {gb(self.available)}  ({self.available_from})")
            fits = self.fitting_context()
            verdict = "fits" if fits >= self.context else (
                f"fits with a context of {fits} tokens" if fits >= MIN_CONTEXT else "does not fit"
            )  # fmt: skip
            lines.append(f"verdict       {verdict}")
        return "\n".join(lines)


def gb(n: int) -> str:
    return f"{n / 2**30:.2f} GB"


def estimate(
    folder: Path,
    context: int,
    *,
    weights: Literal["quantized", "float32"],
    on_cpu: bool,
    kv_bits: int | None = None,
    kv_group_size: int = 64,
    prefix_cache_mb: int = 0,
    mtp: bool = True,
) -> Estimate:
    """The estimate for an MLX model folder (a converted GGUF included); ``mtp``: the
    checkpoint's MTP head, if it carries one, is loaded too."""
    config = _json(folder / "config.json")
    available, source = usable_memory()
    tensors = folder_tensors(folder)
    float32 = weights == "float32"
    return Estimate(
        weights=model_bytes(tensors, config, float32=float32, on_cpu=on_cpu, mtp=mtp, at=folder),
        kv_per_token=kv_bytes_per_token(config, kv_bits, kv_group_size, on_cpu=on_cpu),
        context=context,
        prefix_cache=prefix_cache_mb << 20,
        available=available,
        available_from=source,
    )


def model_estimate(
    spec: str | None,
    *,
    cpu_weights: CpuWeights = "auto",
    max_model_len: int | None = None,
    default_context: int,
    kv_bits: int | None = None,
    kv_group_size: int = 64,
    prefix_cache_mb: int = 0,
    progress: bool = True,
    download: bool = True,
    mtp: bool = True,
) -> Estimate:
    """The estimate for ``spec`` at the context the server would allow: ``max_model_len``,
    else the model's, else ``default_context``. A model on disk is read there; a hub model
    not downloaded yet is downloaded first, or (``download=False``) estimated from its
    config and safetensors headers on the hub; ``mtp``: the MTP head is loaded too."""
    facts = None
    folder: Path | None = None
    if not download and spec and is_model_name(spec) and not model_by_name(spec, download=False):
        ref = parse_hub_ref(spec)
        facts = remote_facts(ref) if ref is not None and ref.quant is None else None
    if facts is None:
        folder = resolve_model(spec, progress=progress)
        facts = (_json(folder / "config.json"), folder_tensors(folder))
    config, tensors = facts
    on_cpu = computes_on_cpu()
    available, source = usable_memory()
    float32 = choose_weights(cpu_weights) == "float32"
    return Estimate(
        weights=model_bytes(tensors, config, float32=float32, on_cpu=on_cpu, mtp=mtp, at=folder),
        kv_per_token=kv_bytes_per_token(config, kv_bits, kv_group_size, on_cpu=on_cpu),
        context=max_model_len or context_length(config) or default_context,
        prefix_cache=prefix_cache_mb << 20,
        available=available,
        available_from=source,
    )


def fit_context(found: Estimate, *, explicit: bool) -> int:
    """The context to serve: the one asked for when it fits, else (unless the operator set
    it with ``--max-model-len``) the longest that fits, logged; a ModelLoadError with the
    numbers when not even MIN_CONTEXT tokens fit."""
    fits = found.fitting_context()
    if fits >= found.context:
        return found.context
    head = (
        f"the model does not fit in the memory MLX can use: it needs {gb(found.needed)} "
        f"(weights {gb(found.weights)}, KV cache {gb(found.kv_per_token * found.context)} for "
        f"{found.context} tokens) and {gb(found.available or 0)} is available "
        f"({found.available_from})"
    )
    if fits < MIN_CONTEXT:
        raise ModelLoadError(
            f"{head}; not even a {MIN_CONTEXT}-token context fits. Use a smaller or more "
            f"quantized model, close other apps, or set {MEMORY_ENV} to override the check"
        )
    if explicit:
        raise ModelLoadError(f"{head}; a context of {fits} tokens fits: --max-model-len {fits}")
    log.warning("%s; serving a context of %d tokens instead (--max-model-len)", head, fits)
    print(f"Context capped to {fits} tokens to fit in memory ({head}).", file=sys.stderr)
    return fits


def usable_memory() -> tuple[int | None, str]:
    """Bytes MLX can use: ``$VLLM_MLX_MEMORY_GB``, else Metal's recommended working set,
    else the system's available RAM (Linux ``MemAvailable``); None when unknown."""
    raw = os.environ.get(MEMORY_ENV)
    if raw:
        try:
            return int(float(raw) * 2**30), MEMORY_ENV
        except ValueError:
            raise ModelLoadError(f"{MEMORY_ENV} must be a number of GB, not {raw!r}") from None
    import mlx.core as mx

    if mx.metal.is_available():
        info: dict[str, Any] = dict(mx.device_info())
        if info.get("max_recommended_working_set_size"):
            return int(info["max_recommended_working_set_size"]), "Metal recommended working set"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, "available RAM"
    except (OSError, ValueError, IndexError):
        pass
    return None, "unknown"


def folder_tensors(folder: Path) -> dict[str, tuple[str, list[int]]]:
    """Every weight tensor's dtype and shape, from the folder's safetensors headers."""
    tensors: dict[str, tuple[str, list[int]]] = {}
    for file in sorted(folder.glob("*.safetensors")):
        tensors.update(safetensors_header(file))
    return tensors


def model_bytes(
    tensors: dict[str, tuple[str, list[int]]],
    config: dict,
    *,
    float32: bool,
    on_cpu: bool,
    mtp: bool,
    at: Path | None = None,
) -> int:
    """The main model's weights (``weight_bytes``, without the MTP layers mlx-lm drops)
    plus, with ``mtp``, the MTP head's: its first layer's tensors but the copies of the
    main model's it shares, in the main model's float type (float32 on the CPU; DeepSeek-V3's
    float8 dequantized, its scales gone). The copies are those the loader finds in the
    folder ``at`` (``mtp_heads.copies_of_main``: headers and sampled rows); with no folder
    (a hub model's headers) a tensor whose header matches the main model's counts as one."""
    head = carried(tensors, config)
    main = {n: t for n, t in tensors.items() if n not in head}
    total = weight_bytes(main, config, float32=float32, on_cpu=on_cpu)
    if on_cpu and not float32 and native.available():
        total += packed_copy_bytes(main, config)
    prefix = head_prefix(config)
    if not mtp or not head or prefix is None:
        return total
    copies = main_copies(tensors, config) if at is None else copies_of_main(at, config)
    shared = tuple(copy.removesuffix("weight") for copy in copies)
    held = [
        n
        for n in head
        if n.startswith(prefix) and not n.startswith(shared) and not n.endswith("_scale_inv")
    ]
    width = 4 if float32 or on_cpu else 2
    return total + sum(math.prod(tensors[n][1]) * width for n in held)


def weight_bytes(
    tensors: dict[str, tuple[str, list[int]]], config: dict, *, float32: bool, on_cpu: bool
) -> int:
    """The weights' bytes after loading, from the tensors' dtypes and shapes: dequantized
    to float32 (``float32``), or as stored with half-precision tensors widened on the CPU
    (the loader does both), except the scales and biases of the layers the native kernels
    take, which they hold as float16 (converted GGUF scales, stored as float32, are halves
    exactly; the kernels keep halves wherever the values survive)."""
    quant = config.get("quantization") or config.get("quantization_config") or {}
    native_layers = native_quantized(tensors, quant) if on_cpu and native.available() else {}
    total = 0
    for name, (dtype, shape) in tensors.items():
        elements = math.prod(shape)
        prefix = name.rsplit(".", 1)[0]
        quantized = dtype == "U32" and f"{prefix}.scales" in tensors
        if float32:
            if name.endswith((".scales", ".biases")) and f"{prefix}.weight" in tensors:
                continue  # gone once the layer is dequantized
            if quantized:
                elements = elements * 32 // quant_of(quant, prefix)[0]
            total += elements * 4
        elif prefix in native_layers and name.endswith((".scales", ".biases")):
            total += elements * 2
        elif on_cpu and dtype in ("F16", "BF16"):
            total += elements * 4
        else:
            total += elements * _DTYPE_BYTES.get(dtype, 4)
    return total


def quant_of(quant: dict, prefix: str) -> tuple[int, int]:
    """A quantized layer's (bits, group size): its own entry, else the model's."""
    own = quant.get(prefix)
    layer: dict = own if isinstance(own, dict) else {}
    bits = int(layer.get("bits", quant.get("bits", 4)))
    return bits, int(layer.get("group_size", quant.get("group_size", 64)))


def native_quantized(
    tensors: dict[str, tuple[str, list[int]]], quant: dict
) -> dict[str, tuple[int, int]]:
    """The layers the native products take, by prefix, with their (bits, group size): 2-D
    affine quantized weights of the sizes they read (the embedding only when it is the
    output head too)."""
    tied = not any("lm_head" in name for name in tensors)
    layers = {}
    for name, (dtype, shape) in tensors.items():
        prefix = name.removesuffix(".weight")
        if dtype != "U32" or len(shape) != 2 or prefix == name:
            continue
        if f"{prefix}.scales" not in tensors or f"{prefix}.biases" not in tensors:
            continue
        if prefix.endswith("embed_tokens") and not tied:
            continue
        bits, group_size = quant_of(quant, prefix)
        if bits in packing.BITS and group_size in packing.GROUP_SIZES:
            layers[prefix] = (bits, group_size)
    return layers


def packed_copy_bytes(tensors: dict[str, tuple[str, list[int]]], config: dict) -> int:
    """The native products' packed weight copies (``native.packing``), which sit beside
    the quantized weights, when the packed body will give them."""
    quant = config.get("quantization") or config.get("quantization_config") or {}
    total = 0
    for prefix, (bits, group_size) in native_quantized(tensors, quant).items():
        rows, words = tensors[f"{prefix}.weight"][1]
        total += packing.tile_bytes(rows, words * 32 // bits, bits, group_size, 2)
    return total if packing.packs(total) else 0


def kv_bytes_per_token(
    config: dict, kv_bits: int | None, kv_group_size: int, *, on_cpu: bool
) -> int:
    """Keys and values of every layer for one token (MLA models cache the latent)."""
    text: dict = config.get("text_config") or config
    layers = int(text.get("num_hidden_layers") or text.get("n_layer") or 0)
    heads = int(text.get("num_attention_heads") or text.get("n_head") or 1)
    if text.get("kv_lora_rank"):
        per_layer = int(text["kv_lora_rank"]) + int(text.get("qk_rope_head_dim") or 0)
    else:
        kv_heads = int(text.get("num_key_value_heads") or heads)
        head_dim = int(text.get("head_dim") or int(text.get("hidden_size") or 0) // heads)
        per_layer = 2 * kv_heads * head_dim
    float_bytes = 4 if on_cpu or str(text.get("torch_dtype")) == "float32" else 2
    per_value = kv_bits / 8 + 2 * float_bytes / kv_group_size if kv_bits else float_bytes
    return int(layers * per_layer * per_value)


def safetensors_header(path: Path) -> dict[str, tuple[str, list[int]]]:
    """Tensor name -> (dtype, shape) from a safetensors file's JSON header."""
    try:
        with path.open("rb") as file:
            (length,) = struct.unpack("<Q", file.read(8))
            header = json.loads(file.read(length))
    except (OSError, ValueError, struct.error) as error:
        raise ModelLoadError(f"cannot read the safetensors header of {path}: {error}") from None
    return {
        name: (info["dtype"], list(info["shape"]))
        for name, info in header.items()
        if name != "__metadata__"
    }


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"cannot read {path}: {error}") from None
    return data if isinstance(data, dict) else {}
