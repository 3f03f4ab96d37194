"""Vision-language models through mlx-vlm: detected from the config, loaded with their
processor, served through the language model in mlx-lm's shape (``engine/vision.py``)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from vllm_mlx.engine.vision import LanguageModel
from vllm_mlx.models.errors import ModelLoadError

log = logging.getLogger(__name__)


def read_config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def has_vision_tower(folder: str | Path) -> bool:
    """Whether a model folder's config describes a vision tower (cheap: no mlx-vlm import;
    for listings of models not loaded yet)."""
    path = Path(folder).expanduser()
    return path.is_dir() and isinstance(read_config(path).get("vision_config"), dict)


def is_vision_config(config: dict[str, Any]) -> bool:
    """A config mlx-vlm knows with a vision tower (``vision_config``) and a model type it
    implements; text-only configs (and text configs of VLM families) stay with mlx-lm."""
    if not isinstance(config.get("vision_config"), dict):
        return False
    from mlx_vlm.utils import get_model_and_args

    try:
        get_model_and_args(dict(config))
    except (ValueError, ImportError, KeyError):
        return False
    return True


def load_vision(path: Path) -> tuple[LanguageModel, Any, Any, dict[str, Any]]:
    """(the language model adapter, its mlx-lm tokenizer, the mlx-vlm processor, config).

    Weights are cast to float32 on the CPU (float16 activations are ~28x slower there);
    the processor is mlx-vlm's own (no torch)."""
    import mlx.core as mx
    from mlx_lm.utils import load_tokenizer
    from mlx_vlm.utils import load as vlm_load

    try:
        vlm, processor = vlm_load(str(path))
        config = read_config(path)
        eos = config.get("eos_token_id") or (config.get("text_config") or {}).get("eos_token_id")
        tokenizer = load_tokenizer(path, eos_token_ids=[eos] if isinstance(eos, int) else eos)
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as error:
        raise ModelLoadError(f"could not load vision model from {path}: {error}") from error
    if getattr(tokenizer, "chat_template", None) is None:
        tokenizer._tokenizer.chat_template = getattr(processor, "chat_template", None)
    try:
        model = LanguageModel(vlm)
    except ValueError as error:
        raise ModelLoadError(f"{config.get('model_type')}: {error}") from error
    if mx.default_device().type == mx.DeviceType.cpu:
        vlm.set_dtype(mx.float32)
    mx.eval(vlm.parameters(), _held_arrays(vlm))
    log.info("vision model %s: %s", config.get("model_type"), type(processor).__name__)
    return model, tokenizer, processor, config


def _held_arrays(vlm: Any) -> list[Any]:
    """Arrays the model keeps outside its parameters (Pixtral's rotary tables, held by a
    plain object on the tower), so they are evaluated at load: left lazy, they belong to
    the loading thread's stream, and a request's thread (which encodes images) cannot
    evaluate them."""
    import mlx.core as mx
    import mlx.nn as nn

    found: list[Any] = []
    seen: set[int] = set()

    def visit(value: Any, depth: int) -> None:
        if id(value) in seen or depth > 4:
            return
        seen.add(id(value))
        if isinstance(value, mx.array):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            for item in value:
                visit(item, depth + 1)
        elif isinstance(value, dict) and not isinstance(value, nn.Module):
            for item in value.values():
                visit(item, depth + 1)
        elif hasattr(value, "__dict__") and not isinstance(value, (type, nn.Module)):
            for item in vars(value).values():
                visit(item, depth + 1)

    for module in vlm.modules():
        for value in vars(module).values():
            visit(value, 0)
    return found
