"""mlx-lm's token loop on the native logsumexp, and requests' samplers on the native draw.

Every decode step of ``generate_step`` and ``BatchGenerator`` normalizes the logits with
``mx.logsumexp`` over the vocabulary; MLX's CPU op runs its exp one lane at a time, ~1 ms a
token over SmolLM2's 49k entries (5-7% of a step), where the native one takes ~0.03 ms.
``route_logsumexp`` gives ``mlx_lm.generate`` a view of ``mlx.core`` whose ``logsumexp``
takes float32 last-axis reductions to the kernel, while the thread steps a model the native
load gave it (`engine.sampling.Numerics`), and everything else to MLX unchanged.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Sequence
from typing import Any

import mlx.core as mx

from vllm_mlx import native
from vllm_mlx.engine import sampling as engine_sampling

# the module (mlx_lm's package exports a function of the same name)
generate = importlib.import_module("mlx_lm.generate")


def _last_axis(a: mx.array, axis: int | Sequence[int] | None) -> bool:
    """Whether reducing ``a`` over ``axis`` is the same as over its last axis only."""
    if axis is None:
        return a.size == a.shape[-1]
    axes = [axis] if isinstance(axis, int) else list(axis)
    return len(axes) == 1 and axes[0] in (-1, a.ndim - 1)


def logsumexp(a: Any, axis: Any = None, keepdims: bool = False, **kwargs: Any) -> mx.array:
    """``mx.logsumexp``, on the native kernel for float32 last-axis reductions."""
    if (
        not kwargs
        and isinstance(a, mx.array)
        and a.dtype == mx.float32
        and a.ndim >= 1
        and a.shape[-1] > 0
        and _last_axis(a, axis)
        and (kernel := engine_sampling.current_numerics().logsumexp) is not None
    ):
        out = kernel(a)  # [..., 1]
        if axis is None:
            return out.reshape([1] * a.ndim if keepdims else [])
        return out if keepdims else out.squeeze(-1)
    return mx.logsumexp(a, axis=axis, keepdims=keepdims, **kwargs)


class _CoreWithNativeLogsumexp(types.ModuleType):
    """``mlx.core`` as ``mlx_lm.generate`` sees it: every name is MLX's but logsumexp."""

    logsumexp = staticmethod(logsumexp)

    def __getattr__(self, name: str) -> Any:
        return getattr(mx, name)


def route_logsumexp() -> None:
    """Point ``mlx_lm.generate``'s ``mx`` at the view (once per process)."""
    if not isinstance(getattr(generate, "mx", None), _CoreWithNativeLogsumexp):
        setattr(generate, "mx", _CoreWithNativeLogsumexp("mlx.core"))  # noqa: B010


def draw(logprobs: mx.array, words: mx.array, filters: engine_sampling.Filters, inv_temp: float):
    """``engine.sampling.Draw`` on the native kernel: one pass over the vocabulary, no sort
    and no per-entry noise (MLX's CPU ops: ~6-27 ms a token over a 49k vocabulary)."""
    return native.sample(logprobs, words, filters.top_p, filters.min_p, filters.top_k, inv_temp)


def route_sampling(model: Any) -> None:
    """``model``'s rows are normalized on the native logsumexp and its requests draw on the
    native kernel (when the built library has it); other models keep MLX's ops."""
    engine_sampling.give_numerics(
        model,
        engine_sampling.Numerics(
            draw=draw if native.provides("sample") else None, logsumexp=native.logsumexp
        ),
    )
