"""Load a resolved model with mlx-lm, in the weight format that runs fastest on this device.

On Linux the MLX CPU backend multiplies quantized weights with a plain loop. When the
native kernels (``vllm_mlx.native``) are built, quantized weights run on them and ``auto``
keeps the weights quantized; without them ``auto`` dequantizes to float32, which goes
through BLAS (fast when Debian's OpenBLAS is preloaded). Elsewhere weights stay quantized.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from vllm_mlx.models.default_model import DEFAULT_MODEL_NAME, is_default_model_name
from vllm_mlx.models.errors import ModelLoadError
from vllm_mlx.models.memory import freeze_loaded_objects, limit_buffer_cache
from vllm_mlx.models.resolve import display_name, is_model_name, resolve_model
from vllm_mlx.models.vision import is_vision_config, load_vision, read_config
from vllm_mlx.native import available as native_available
from vllm_mlx.native import status as native_status
from vllm_mlx.native.patch import enable as enable_native

log = logging.getLogger(__name__)

CpuWeights = Literal["auto", "quantized", "float32"]
# What ``auto`` means for every process that inherits it (``quantized``: the path macOS takes,
# MLX's own quantized kernels; the CI's Mac lane sets it with VLLM_MLX_NATIVE=0). `serve
# --cpu-weights` reads it too, so a server started under it does not re-execute with OpenBLAS.
CPU_WEIGHTS_ENV = "VLLM_MLX_CPU_WEIGHTS"
_CONTEXT_KEYS = ("max_position_embeddings", "max_seq_len", "n_positions", "seq_length")


@dataclass
class LoadedModel:
    """A model ready for generation, with what the server reports about it."""

    model: Any  # mlx.nn.Module
    tokenizer: Any  # mlx_lm.tokenizer_utils.TokenizerWrapper (a protocols.DecodingTokenizer)
    path: Path
    name: str
    chat_template: str | None
    context_length: int | None
    weights: Literal["quantized", "float32"]
    kernels: str = "mlx"  # "native: ..." when layers run on vllm_mlx.native
    processor: Any = None  # a vision-language model's mlx-vlm processor (it reads images)


def served_name(spec: str | None, path: Path) -> str:
    """The name clients see by default: the default model's name, the hub id or Ollama
    name it was given by, a GGUF's stem or the folder."""
    if is_default_model_name(spec):
        return DEFAULT_MODEL_NAME
    if spec is not None and is_model_name(spec):
        return display_name(spec)
    given = Path(spec or "").expanduser()
    return given.stem if given.is_file() else given.resolve().name or str(path)


def context_length(config: dict[str, Any]) -> int | None:
    """The model's trained context window from its config, if it states one."""
    for source in (config, config.get("text_config") or {}):
        for key in _CONTEXT_KEYS:
            if isinstance(source.get(key), int) and source[key] > 0:
                return source[key]
    return None


def computes_on_cpu() -> bool:
    """True when MLX's default device is the CPU (always on Linux, optional on macOS)."""
    import mlx.core as mx

    return mx.default_device().type == mx.DeviceType.cpu


def choose_weights(cpu_weights: CpuWeights) -> Literal["quantized", "float32"]:
    """Resolve ``auto`` (``VLLM_MLX_CPU_WEIGHTS`` when set): on Linux when MLX computes on
    the CPU, quantized if the native kernels are built and float32 otherwise; quantized
    everywhere else."""
    if cpu_weights == "auto":
        cpu_weights = os.environ.get(CPU_WEIGHTS_ENV) or "auto"  # type: ignore[assignment]
    if cpu_weights not in ("auto", "quantized", "float32"):
        raise ValueError(f"cpu_weights must be auto, quantized or float32, not {cpu_weights!r}")
    if cpu_weights != "auto":
        return cpu_weights
    if sys.platform.startswith("linux") and computes_on_cpu() and not native_available():
        return "float32"
    return "quantized"


def to_float32(model: Any, evaluate: bool = True) -> Any:
    """Dequantize every quantized layer and cast floating parameters to float32."""
    import mlx.core as mx
    from mlx_lm.utils import dequantize_model

    model = dequantize_model(model)
    model.set_dtype(mx.float32)
    if evaluate:
        mx.eval(model.parameters())
    return model


def load_model(
    spec: str | None,
    *,
    cpu_weights: CpuWeights = "auto",
    progress: bool = True,
    shard: Callable[[Any], object] | None = None,
) -> LoadedModel:
    """Resolve ``spec`` (see ``resolve_model``) and load it with mlx-lm.

    ``shard`` (a sharded server) gets the model before any weight is read, so each rank
    reads only its share; the native kernels are then left out (they patch whole layers)."""
    weights = choose_weights(cpu_weights)
    path = resolve_model(spec, progress=progress)
    import mlx.core as mx
    from mlx_lm.utils import load

    on_cpu = computes_on_cpu()
    if on_cpu:
        limit_buffer_cache()
    if shard is None and is_vision_config(read_config(path)):
        language, tokenizer, processor, config = load_vision(path)
        weights_kind = "quantized" if config.get("quantization") else "float32"
        loaded = _loaded(spec, path, language, tokenizer, config, weights_kind)
        loaded.processor = processor
        freeze_loaded_objects()
        return loaded
    try:
        model, tokenizer, config = load(  # type: ignore[misc]
            str(path), return_config=True, lazy=shard is not None
        )
    except ModelLoadError:
        raise
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, json.JSONDecodeError) as error:
        raise ModelLoadError(f"could not load model from {path}: {error}") from error
    kernels = "mlx"
    if weights == "float32":
        model = to_float32(model, evaluate=shard is None)
    elif on_cpu:
        # float16/bfloat16 scales or weights would make every activation half precision,
        # ~28x slower on x86 CPUs; packed quantized weights are integers and stay as they are.
        model.set_dtype(mx.float32)
        if shard is None:
            kernels = use_native_kernels(model)
    if shard is not None:
        shard(model)
        mx.eval(model.parameters())
    loaded = _loaded(spec, path, model, tokenizer, config, weights)
    loaded.kernels = kernels
    freeze_loaded_objects()
    return loaded


def use_native_kernels(model: Any) -> str:
    """Route the quantized layers and attention to ``vllm_mlx.native`` when it is built."""
    if not native_available():
        log.info("CPU kernels: MLX's own (vllm_mlx.native is not built or is disabled)")
        return "mlx"
    description = enable_native(model).describe()
    info = native_status()
    log.info(
        "CPU kernels: native (%s, %d threads) for %s", info["isa"], info["threads"], description
    )
    return f"native ({info['isa']}): {description}"


def load_tokenizer_only(spec: str | None) -> LoadedModel:
    """The model's tokenizer and facts without its weights (``model`` is None): for serving
    a replayed output, which needs the real tokenizer but no forward pass."""
    from mlx_lm.utils import load_tokenizer

    path = resolve_model(spec, progress=False)
    try:
        config = json.loads((path / "config.json").read_text())
        tokenizer = load_tokenizer(path)
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"could not load the tokenizer from {path}: {error}") from error
    return _loaded(spec, path, None, tokenizer, config, "quantized")


def _loaded(spec, path, model, tokenizer, config, weights) -> LoadedModel:
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        path=path,
        name=served_name(spec, path),
        chat_template=getattr(tokenizer, "chat_template", None),
        context_length=context_length(config),
        weights=weights,
    )
