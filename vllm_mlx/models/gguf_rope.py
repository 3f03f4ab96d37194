"""Recover Llama 3.1-style rope scaling parameters from a GGUF's ``rope_freqs`` tensor.

llama.cpp stores Llama 3 rope scaling as one divisor per rotary frequency (computed from the
parameters by ``convert_hf_to_gguf``), while mlx-lm's ``Llama3RoPE`` wants the parameters.
Every released Llama 3.x model uses the same low/high frequency factors and original context,
so the importer tries those, recomputes the divisors and accepts them only on an exact match.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vllm_mlx.models.errors import ModelLoadError

# (low_freq_factor, high_freq_factor, original_max_position_embeddings) of Llama 3.1-3.3.
LLAMA3_ROPE_CANDIDATES = ((1.0, 4.0, 8192),)


def llama3_rope_factors(
    head_dim: int,
    base: float,
    factor: float,
    low_freq_factor: float,
    high_freq_factor: float,
    original_context: int,
) -> np.ndarray:
    """The per-frequency divisors llama.cpp writes for these Llama 3 rope parameters."""
    freqs = 1.0 / base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    wavelength = 2 * math.pi / freqs
    smooth = (original_context / wavelength - low_freq_factor) / (
        high_freq_factor - low_freq_factor
    )
    blended = 1.0 / ((1 - smooth) / factor + smooth)
    return np.where(
        wavelength < original_context / high_freq_factor,
        1.0,
        np.where(wavelength > original_context / low_freq_factor, factor, blended),
    )


def llama3_rope_scaling(rope_freqs: Any, head_dim: int, base: float) -> dict[str, Any]:
    """mlx-lm's ``rope_scaling`` for a ``rope_freqs`` tensor, or a ModelLoadError."""
    stored = np.asarray(rope_freqs, dtype=np.float64).reshape(-1)
    if stored.shape != (head_dim // 2,):
        raise ModelLoadError(
            f"GGUF rope_freqs has {stored.size} values; expected {head_dim // 2} (head_dim / 2)"
        )
    factor = float(stored.max())
    for low, high, original in LLAMA3_ROPE_CANDIDATES:
        expected = llama3_rope_factors(head_dim, base, factor, low, high, original)
        if np.allclose(stored, expected, rtol=1e-4, atol=1e-6):
            return {
                "rope_type": "llama3",
                "factor": factor,
                "low_freq_factor": low,
                "high_freq_factor": high,
                "original_max_position_embeddings": original,
            }
    raise ModelLoadError(
        "GGUF rope_freqs do not match Llama 3 rope scaling with any known parameters; "
        "vllm-mlx cannot import this rope layout"
    )
