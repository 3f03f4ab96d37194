"""Resolve a model name or path to a local MLX model folder and load it.

Public API: ``load_model``, ``LoadedModel``, ``resolve_model``, ``ModelLoadError``,
``convert_gguf``, ``DEFAULT_MODEL_NAME``. Imports are lazy so ``vllm-mlx --help`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "load_model": "vllm_mlx.models.loader",
    "LoadedModel": "vllm_mlx.models.loader",
    "resolve_model": "vllm_mlx.models.resolve",
    "ModelLoadError": "vllm_mlx.models.errors",
    "convert_gguf": "vllm_mlx.models.gguf",
    "DEFAULT_MODEL_NAME": "vllm_mlx.models.default_model",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'vllm_mlx.models' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
