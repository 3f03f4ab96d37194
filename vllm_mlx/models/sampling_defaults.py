"""The sampling a model's authors recommend, for requests (and operators) that set none.

Agent clients (Claude Code, Codex) send no temperature, so the server's default is what a
small model actually samples with. The layers, highest first: the request's field, the
operator's flag (``--temperature`` …), the model folder's ``generation_config.json`` (a GGUF's
``general.sampling.*`` keys are written there at conversion), this family table, neutral
(temperature 1, no filtering).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")

# GGUF general.sampling.* key -> generation_config.json key (llama.cpp's names)
GGUF_SAMPLING_KEYS = {
    "general.sampling.temp": "temperature",
    "general.sampling.top_p": "top_p",
    "general.sampling.top_k": "top_k",
    "general.sampling.min_p": "min_p",
    "general.sampling.penalty_repeat": "repetition_penalty",
}

# config.json model_type (longest prefix wins) -> the model cards' recommended sampling,
# used only when generation_config.json sets none of it.
FAMILY_SAMPLING: dict[str, dict[str, float | int]] = {
    "qwen3": {"temperature": 0.6, "top_p": 0.95, "top_k": 20},
    "qwen2": {"temperature": 0.7, "top_p": 0.8, "top_k": 20},
    "deepseek": {"temperature": 0.6, "top_p": 0.95},
    "gemma": {"temperature": 1.0, "top_p": 0.95, "top_k": 64},
    "llama": {"temperature": 0.6, "top_p": 0.9},
    "mistral": {"temperature": 0.7},
    "phi": {"temperature": 0.7},
    "gpt_oss": {"temperature": 1.0, "top_p": 1.0},
}


def family_sampling(model_type: str | None) -> dict[str, float | int]:
    """The fallback row for ``model_type`` (``{}``: neutral)."""
    matches = [k for k in FAMILY_SAMPLING if model_type and model_type.startswith(k)]
    return dict(FAMILY_SAMPLING[max(matches, key=len)]) if matches else {}


def generation_sampling(config: dict[str, Any]) -> dict[str, float | int]:
    """The sampling fields a generation_config.json (or GGUF-derived dict) sets, valid ones."""
    found: dict[str, float | int] = {}
    for key in SAMPLING_KEYS:
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            continue
        found[key] = int(value) if key == "top_k" else float(value)
    return found


def model_sampling(path: Path) -> dict[str, float | int]:
    """The model's own sampling defaults: generation_config.json over the family row."""
    config = _json(path / "config.json")
    chosen = family_sampling(config.get("model_type"))
    chosen.update(generation_sampling(_json(path / "generation_config.json")))
    return chosen


def _json(file: Path) -> dict[str, Any]:
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
