"""vllm-mlx: a local OpenAI- and Anthropic-compatible LLM server on MLX.

``from vllm_mlx import LLM`` for the Python API. Importing the package loads nothing heavy;
MLX is imported when an ``LLM`` or ``SamplingParams`` is first used.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LLM", "SamplingParams"]

_LAZY = {"LLM": "vllm_mlx.llm", "SamplingParams": "vllm_mlx.engine.sampling"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'vllm_mlx' has no attribute {name!r}")
