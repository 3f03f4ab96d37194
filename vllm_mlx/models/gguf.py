"""Convert a llama.cpp GGUF file into an MLX model folder that ``mlx_lm.utils.load`` reads.

MLX reads Q4_0, Q4_1 and Q8_0 tensors straight into its own affine-quantized layout (packed
uint32 weight plus per-group scales and biases), so the import keeps them quantized and only
renames tensors, undoes llama.cpp's rope row permutation of Q and K, and writes the config,
weights and a rebuilt tokenizer. Every other quantization type is refused by name: silently
dequantizing it would hide a large change in memory and speed.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import mlx.core as mx
from tqdm import tqdm

from vllm_mlx.models.errors import ModelLoadError
from vllm_mlx.models.gguf_header import GGUFHeader, read_gguf_header
from vllm_mlx.models.gguf_rope import llama3_rope_scaling
from vllm_mlx.models.gguf_tokenizer import write_tokenizer_files
from vllm_mlx.models.sampling_defaults import GGUF_SAMPLING_KEYS, generation_sampling

# GGUF tensor type -> (bits, group size) of the MLX affine layout it loads as; None = float.
TENSOR_TYPES: dict[str, tuple[int, int] | None] = {
    "F32": None,
    "F16": None,
    "Q4_0": (4, 32),
    "Q4_1": (4, 32),
    "Q8_0": (8, 32),
}


@dataclass(frozen=True)
class Architecture:
    """How a GGUF ``general.architecture`` maps onto an mlx-lm model."""

    model_type: str
    hf_class: str
    permuted_qk: bool  # llama.cpp interleaves Q/K rows only for its llama-family converter


ARCHITECTURES = {
    "llama": Architecture("llama", "LlamaForCausalLM", permuted_qk=True),
    "qwen2": Architecture("qwen2", "Qwen2ForCausalLM", permuted_qk=False),
}

_GLOBAL_TENSORS = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
_LAYER_TENSORS = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_PARAMETER_SUFFIXES = ("weight", "scales", "biases", "bias")


def read_header(path: Path) -> GGUFHeader:
    """Read architecture and tensor types, refusing what the importer cannot convert."""
    header = read_gguf_header(path)
    if header.architecture not in ARCHITECTURES:
        raise ModelLoadError(
            f"GGUF file {path.name} has architecture {header.architecture!r}, which vllm-mlx "
            f"cannot import; supported: {', '.join(ARCHITECTURES)}"
        )
    for name, kind in header.tensor_types.items():
        if kind not in TENSOR_TYPES:
            raise ModelLoadError(
                f"GGUF tensor {name} has type {kind}, which vllm-mlx cannot import; "
                f"supported: {', '.join(TENSOR_TYPES)}"
            )
        if TENSOR_TYPES[kind] is not None and not name.endswith(".weight"):
            # MLX names a quantized tensor's scales/biases after its ".weight" prefix.
            raise ModelLoadError(f"GGUF tensor {name} is quantized ({kind}) but is not a weight")
    return header


def _scalar(metadata: dict[str, Any], key: str, default: Any = None) -> Any:
    value = metadata.get(key, default)
    if value is None:
        return default
    return value.item() if isinstance(value, mx.array) else value


def _required(metadata: dict[str, Any], key: str) -> Any:
    value = _scalar(metadata, key)
    if value is None:
        raise ModelLoadError(f"GGUF metadata lacks required key {key}")
    return value


def model_config(
    metadata: dict[str, Any], header: GGUFHeader, rope_freqs: mx.array | None = None
) -> dict[str, Any]:
    """Translate ``<arch>.*`` GGUF metadata (and ``rope_freqs``) into an mlx-lm config.json."""
    arch = header.architecture or ""  # checked against ARCHITECTURES when the file was read
    architecture = ARCHITECTURES[arch]
    hidden = int(_required(metadata, f"{arch}.embedding_length"))
    heads = int(_required(metadata, f"{arch}.attention.head_count"))
    tokens = metadata.get("tokenizer.ggml.tokens") or []
    config: dict[str, Any] = {
        "model_type": architecture.model_type,
        "architectures": [architecture.hf_class],
        "hidden_size": hidden,
        "num_hidden_layers": int(_required(metadata, f"{arch}.block_count")),
        "intermediate_size": int(_required(metadata, f"{arch}.feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(_scalar(metadata, f"{arch}.attention.head_count_kv", heads)),
        "head_dim": int(_scalar(metadata, f"{arch}.attention.key_length", hidden // heads)),
        "rms_norm_eps": float(_required(metadata, f"{arch}.attention.layer_norm_rms_epsilon")),
        "vocab_size": int(_scalar(metadata, f"{arch}.vocab_size", len(tokens))),
        "rope_theta": float(_scalar(metadata, f"{arch}.rope.freq_base", 10000.0)),
        "rope_traditional": False,
        "tie_word_embeddings": "output.weight" not in header.tensor_types,
        "attention_bias": "blk.0.attn_q.bias" in header.tensor_types,
        "mlp_bias": "blk.0.ffn_up.bias" in header.tensor_types,
    }
    context = _scalar(metadata, f"{arch}.context_length")
    if context is not None:
        config["max_position_embeddings"] = int(context)
    if rope_freqs is not None:
        config["rope_scaling"] = llama3_rope_scaling(
            rope_freqs, config["head_dim"], config["rope_theta"]
        )
    scaling = _scalar(metadata, f"{arch}.rope.scaling.type")
    if scaling not in (None, "none"):
        if scaling != "linear":
            raise ModelLoadError(f"GGUF rope scaling {scaling!r} is not supported")
        factor = float(_required(metadata, f"{arch}.rope.scaling.factor"))
        config["rope_scaling"] = {"type": "linear", "factor": factor}
    for role in ("bos", "eos"):
        token_id = _scalar(metadata, f"tokenizer.ggml.{role}_token_id")
        if token_id is not None:
            config[f"{role}_token_id"] = int(token_id)
    return config


def _mlx_name(gguf_name: str) -> tuple[str, str]:
    """Return (module path, parameter) for a llama.cpp tensor name, e.g. blk.3.attn_q.scales."""
    base, _, parameter = gguf_name.rpartition(".")
    if parameter not in _PARAMETER_SUFFIXES:
        base, parameter = gguf_name, "weight"
    if base in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[base], parameter
    parts = base.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in _LAYER_TENSORS:
        return f"model.layers.{parts[1]}.{_LAYER_TENSORS[parts[2]]}", parameter
    raise ModelLoadError(f"GGUF tensor {gguf_name} has no counterpart in the MLX model")


def unpermute_rope_rows(array: mx.array, heads: int) -> mx.array:
    """Undo llama.cpp's per-head row interleave of Q/K (``permute`` in convert_hf_to_gguf)."""
    rows = array.shape[0]
    return (
        array.reshape(heads, rows // heads // 2, 2, *array.shape[1:])
        .swapaxes(1, 2)
        .reshape(array.shape)
    )


def _gguf_type_of(gguf_name: str, header: GGUFHeader) -> str:
    base, _, parameter = gguf_name.rpartition(".")
    if parameter in ("scales", "biases"):
        return header.tensor_types.get(f"{base}.weight", "F32")
    return header.tensor_types.get(gguf_name, "F32")


def convert_weights(
    tensors: dict[str, mx.array],
    config: dict[str, Any],
    header: GGUFHeader,
    on_tensor: Callable[[], object] = lambda: None,
) -> tuple[dict[str, mx.array], dict[str, Any] | None]:
    """Rename and fix up tensors; return MLX weights and the quantization config (or None)."""
    permute_heads = {}
    if ARCHITECTURES[header.architecture or ""].permuted_qk:
        permute_heads = {
            "self_attn.q_proj": config["num_attention_heads"],
            "self_attn.k_proj": config["num_key_value_heads"],
        }
    weights: dict[str, mx.array] = {}
    layouts: dict[str, tuple[int, int]] = {}
    for gguf_name in sorted(tensors):
        array = tensors[gguf_name]
        module, parameter = _mlx_name(gguf_name)
        for suffix, heads in permute_heads.items():
            if module.endswith(suffix):
                array = unpermute_rope_rows(array, heads)
        if array.dtype in (mx.float16, mx.bfloat16) and (
            parameter in ("scales", "biases") or array.ndim == 1
        ):
            # float16 arithmetic is ~28x slower on x86 CPUs: keep small tensors in float32.
            array = array.astype(mx.float32)
        layout = TENSOR_TYPES[_gguf_type_of(gguf_name, header)]
        if layout is not None and parameter == "weight":
            layouts[module] = layout
        weights[f"{module}.{parameter}"] = array
        mx.eval(array)
        on_tensor()
    return weights, _quantization_config(layouts)


def _quantization_config(layouts: dict[str, tuple[int, int]]) -> dict[str, Any] | None:
    """The most common layout as the default, plus one entry per module that differs."""
    if not layouts:
        return None
    (bits, group_size), _ = Counter(layouts.values()).most_common(1)[0]
    config: dict[str, Any] = {"group_size": group_size, "bits": bits, "mode": "affine"}
    for module, (module_bits, module_group) in sorted(layouts.items()):
        if (module_bits, module_group) != (bits, group_size):
            config[module] = {"group_size": module_group, "bits": module_bits, "mode": "affine"}
    return config


def convert_gguf(gguf_path: Path, out_dir: Path, *, progress: bool = True) -> dict[str, Any]:
    """Write config.json, model.safetensors and tokenizer files for ``gguf_path`` into
    ``out_dir`` (which must exist and be empty); return the written config.

    ``progress`` shows a bar on stderr: reading, each tensor, writing weights, tokenizer.
    """
    header = read_header(gguf_path)
    with tqdm(
        total=len(header.tensor_types) + 3,  # corrected once MLX splits quantized tensors
        desc=f"Converting {gguf_path.name}",
        unit="step",
        file=sys.stderr,
        disable=not progress,
    ) as bar:
        try:
            loaded = mx.load(str(gguf_path), format="gguf", return_metadata=True)
            tensors, metadata = cast(tuple[dict[str, mx.array], dict[str, Any]], loaded)
        except (RuntimeError, ValueError) as error:
            raise ModelLoadError(f"MLX could not read GGUF file {gguf_path}: {error}") from error
        bar.total = len(tensors) + 3
        bar.update()
        rope_freqs = tensors.pop("rope_freqs.weight", None)  # folded into the config
        config = model_config(metadata, header, rope_freqs)
        bar.update(int(rope_freqs is not None))
        weights, quantization = convert_weights(tensors, config, header, bar.update)
        if quantization is not None:
            config["quantization"] = quantization
            config["quantization_config"] = quantization
        mx.save_safetensors(str(out_dir / "model.safetensors"), weights, {"format": "mlx"})
        bar.update()
        (out_dir / "config.json").write_text(json.dumps(config, indent=2))
        generation: dict[str, Any] = {
            k: config[k] for k in ("bos_token_id", "eos_token_id") if k in config
        }
        sampling = {to: metadata[key] for key, to in GGUF_SAMPLING_KEYS.items() if key in metadata}
        generation.update(generation_sampling({k: _scalar(sampling, k) for k in sampling}))
        (out_dir / "generation_config.json").write_text(json.dumps(generation, indent=2))
        write_tokenizer_files(metadata, out_dir, config.get("max_position_embeddings"))
        bar.update()
    return config
