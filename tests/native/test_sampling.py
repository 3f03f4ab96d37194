"""The native logsumexp against MLX's, and mlx-lm's token loop routed to it."""

from __future__ import annotations

import importlib
import math

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_mlx import native
from vllm_mlx.engine.sampling import MLX_OPS, Numerics, computing_with
from vllm_mlx.native.sampling import logsumexp, route_logsumexp

generate = importlib.import_module("mlx_lm.generate")  # the module, not mlx_lm.generate()
pytestmark = pytest.mark.skipif(not native.available(), reason="vllm_mlx.native is not built")
SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
INF = math.inf


@given(
    lead=st.sampled_from([(), (1,), (3,), (2, 2)]),
    width=st.integers(1, 70_000),
    spread=st.sampled_from([0.1, 5.0, 80.0]),
    seed=st.integers(0, 2**31 - 1),
)
@SETTINGS
def test_logsumexp_matches_float64(isa, lead, width, spread, seed) -> None:
    """Against the float64 value (MLX's own float32 op errs ~5e-5 on a 49k vocabulary)."""
    x = mx.random.normal((*lead, width), key=mx.random.key(seed)) * spread
    got = np.array(native.logsumexp(x))
    assert got.shape == (*lead, 1)
    x64 = np.array(x, dtype=np.float64)
    top = x64.max(-1, keepdims=True)
    want = top + np.log(np.exp(x64 - top).sum(-1, keepdims=True))
    assert np.abs(got - want).max() <= 2e-6 * (1 + np.abs(want).max())


@pytest.mark.parametrize(
    "row",
    [[1.0, 2.0, INF], [-INF, -INF], [1.0, -INF], [math.nan, 1.0], [INF, -INF], [-INF] * 9 + [3.0]],
)
def test_logsumexp_treats_nan_and_infinities_as_mlx_does(isa, row) -> None:
    x = mx.array([row * 3])  # 3x: the vector body and its tail both see them
    got = native.logsumexp(x).item()
    want = mx.logsumexp(x, axis=-1).item()
    assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize(
    "shape, axis, keepdims",
    [
        ((1, 50), None, True),  # generate_step's call
        ((1, 50), None, False),
        ((4, 50), -1, True),  # BatchGenerator's
        ((4, 50), 1, False),
        ((4, 50), [1], True),
        ((4, 50), None, True),  # not the last axis only: MLX's op
        ((4, 50), 0, True),
        ((50,), 0, False),
    ],
)
def test_the_routed_logsumexp_keeps_mlx_shapes(shape, axis, keepdims) -> None:
    x = mx.random.normal(shape, key=mx.random.key(0))
    with computing_with(Numerics(logsumexp=native.logsumexp)):  # a native model's step
        got = logsumexp(x, axis=axis, keepdims=keepdims)
    want = mx.logsumexp(x, axis, keepdims)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.allclose(np.array(got), np.array(want), atol=1e-4)
    half = x.astype(mx.float16)  # other dtypes: MLX's op
    assert logsumexp(half, axis=axis, keepdims=keepdims).dtype == mx.float16


def test_mlx_lm_generate_sees_mlx_with_the_native_logsumexp() -> None:
    route_logsumexp()
    route_logsumexp()  # once: the view is not wrapped twice
    assert generate.mx.logsumexp is logsumexp
    assert generate.mx.array is mx.array and generate.mx.eval is mx.eval
    assert generate.mx.softmax is mx.softmax and generate.mx.__name__ == "mlx.core"


def test_the_routed_logsumexp_is_mlx_s_outside_a_native_model_s_step() -> None:
    """A model the native load did not patch keeps MLX's bits, whatever else was loaded."""
    x = mx.random.normal((4, 5000), key=mx.random.key(1)) * 5
    want = mx.logsumexp(x, axis=-1, keepdims=True)
    assert mx.array_equal(logsumexp(x, axis=-1, keepdims=True), want).item()
    with computing_with(MLX_OPS):
        assert mx.array_equal(logsumexp(x, axis=-1, keepdims=True), want).item()
