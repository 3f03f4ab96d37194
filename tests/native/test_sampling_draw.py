"""The native draw against the request sampler's MLX path (mlx-lm's filters, then the
temperature): the same kept set, the same probabilities, seeds and rows independent."""

from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from vllm_mlx import native
from vllm_mlx.engine.sampling import RequestSampler, SamplingParams
from vllm_mlx.native.sampling import draw

pytestmark = pytest.mark.skipif(not native.available(), reason="vllm_mlx.native is not built")
FILTERS = [
    {},
    {"top_p": 0.9},
    {"top_p": 0.5},
    {"min_p": 0.05},
    {"min_p": 0.2},
    {"top_k": 40},
    {"top_k": 1},
    {"top_p": 0.95, "min_p": 0.05},
    {"top_p": 0.9, "top_k": 20},
    {"min_p": 0.01, "top_k": 64},
    {"top_p": 0.95, "min_p": 0.02, "top_k": 40},
]


def _row(width: int, spread: float, seed: int) -> mx.array:
    """Log-probabilities [1, width], like a model's (some ties from rounding to 1/64)."""
    x = mx.random.normal((1, width), key=mx.random.key(seed)) * spread
    x = mx.round(x * 64) / 64
    return x - mx.logsumexp(x, axis=-1, keepdims=True)


def _reference(x: mx.array, params: SamplingParams) -> np.ndarray:
    """float64 probabilities of the MLX path's distribution (its ``logits``)."""
    weights = np.array(RequestSampler(params).logits(x)[0], dtype=np.float64)
    finite = np.isfinite(weights)
    p = np.zeros_like(weights)
    p[finite] = np.exp(weights[finite] - weights[finite].max())
    return p / p.sum()


def _words(u: np.ndarray) -> mx.array:
    """uint32 [n, 2] the kernel reads back as the uniforms ``u`` (53 bits)."""
    bits = np.floor(np.asarray(u, dtype=np.float64) * 2.0**53).astype(np.uint64)
    a = ((bits >> np.uint64(26)) << np.uint64(5)).astype(np.uint32)
    b = ((bits & np.uint64(2**26 - 1)) << np.uint64(6)).astype(np.uint32)
    return mx.array(np.stack([a, b], axis=1))


def _draws(x: mx.array, u: np.ndarray, params: SamplingParams, inv_temp: float) -> np.ndarray:
    """The token for each uniform, on the one row ``x``."""
    sampler = RequestSampler(params)
    words = _words(u)
    tokens = [draw(x, words[i : i + 1], sampler.filters, inv_temp) for i in range(words.shape[0])]
    return np.array(mx.concatenate(tokens))


@pytest.mark.parametrize("filters", FILTERS, ids=lambda f: ",".join(f) or "none")
@pytest.mark.parametrize("width,spread,seed", [(4096, 3.0, 1), (49152, 2.0, 2), (49152, 6.0, 3)])
def test_kept_set_is_the_mlx_paths(isa, filters, width, spread, seed) -> None:
    """At a temperature so high that every kept token weighs the same, the token for the
    uniform (i + 1/2) / K is the i-th kept one: the kept sets are equal, token for token."""
    params = SamplingParams(temperature=1.0, seed=0, **filters)
    x = _row(width, spread, seed)
    kept = np.flatnonzero(_reference(x, params) > 0)
    if kept.size > 3000:  # filters off: every finite entry; check a spread of them
        positions = np.linspace(0, kept.size - 1, 600).astype(int)
    else:
        positions = np.arange(kept.size)
    u = (positions + 0.5) / kept.size
    got = _draws(x, u, params, inv_temp=1e-7)
    np.testing.assert_array_equal(got, kept[positions])


@pytest.mark.parametrize("filters", FILTERS, ids=lambda f: ",".join(f) or "none")
@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.5])
def test_probabilities_are_the_mlx_paths(isa, filters, temperature) -> None:
    """Inverse CDF in token order: the uniforms just inside each likely token's interval
    of the reference CDF give that token, so each probability matches to ~1e-6."""
    params = SamplingParams(temperature=temperature, seed=0, **filters)
    x = _row(49152, 3.0, 7)
    p = _reference(x, params)
    upper = np.cumsum(p)
    lower = upper - p
    likely = np.flatnonzero(p > 1e-3)[:200]
    margin = 2e-6 + 1e-3 * p[likely]
    u = np.concatenate([lower[likely] + margin, upper[likely] - margin])
    got = _draws(x, u, params, inv_temp=1.0 / temperature)
    np.testing.assert_array_equal(got, np.concatenate([likely, likely]))


@pytest.mark.parametrize("filters", [{}, {"top_p": 0.8}, {"min_p": 0.1, "top_k": 6}])
def test_sample_histogram_matches(isa, filters) -> None:
    """40,000 seeded draws on a 12-token row: Pearson's chi-square against the MLX path's
    probabilities stays under the 1e-6 tail of its distribution."""
    params = SamplingParams(temperature=0.8, **filters)
    x = _row(12, 1.5, 11)
    p = _reference(x, params)
    rows = 40_000
    words = mx.random.split(mx.random.key(5), rows)
    tokens = np.array(
        draw(mx.broadcast_to(x, (rows, 12)), words, RequestSampler(params).filters, 1.25)
    )
    counts = np.bincount(tokens, minlength=12)
    assert counts[p == 0].sum() == 0
    expected = rows * p[p > 0]
    chi2 = float((((counts[p > 0] - expected) ** 2) / expected).sum())
    df = int((p > 0).sum()) - 1
    # Wilson-Hilferty: the chi-square quantile at 1 - 1e-6 (z = 4.753)
    bound = df * (1 - 2 / (9 * df) + 4.753 * math.sqrt(2 / (9 * df))) ** 3 if df else 0.0
    assert chi2 <= bound


def _one(x: mx.array, params: SamplingParams, u: float) -> int:
    return int(_draws(x, np.array([u]), params, 1.0 / params.temperature)[0])


def test_edge_cases(isa) -> None:
    inf = math.inf
    equal = mx.zeros((1, 10))
    for u in (0.0, 0.3, 1 - 2**-53):  # top_k among ties: the lowest indices, as MLX's
        assert _one(equal, SamplingParams(top_k=3), u) < 3
    assert _one(equal, SamplingParams(top_p=0.5), 1 - 2**-53) == 9  # ties all kept
    assert _one(equal, SamplingParams(top_p=1.0), 1 - 2**-53) == 9  # top_p 1: off
    for u in (0.0, 0.5, 1 - 2**-53):  # top_k >= V: every token (mlx-lm's op refuses it)
        params = SamplingParams(top_k=10 + int(u * 5))
        assert _one(equal, params, u) == min(int(u * 10), 9)
        assert int(RequestSampler(params)(equal)[0]) in range(10)
    masked = mx.array([[-inf, -1.0, -inf, -1.0, -3.0, -inf]])
    for filters in ({"min_p": 0.05}, {"min_p": 1.0}, {"top_p": 0.99}, {}):
        for u in np.linspace(0, 1 - 2**-53, 9):
            assert _one(masked, SamplingParams(**filters), float(u)) in (1, 3, 4)
    assert _one(masked, SamplingParams(min_p=1.0), 1 - 2**-53) == 3  # the two maxima
    single = mx.array([[-inf, -inf, 0.0, -inf]])
    assert _one(single, SamplingParams(top_p=0.3, min_p=0.5, top_k=2), 0.99) == 2


def test_seeds_reproduce_and_rows_are_independent(isa) -> None:
    x = _row(49152, 2.0, 4)
    params = SamplingParams(temperature=0.9, top_p=0.95, seed=42)

    def tokens(sampler: RequestSampler, neighbour: RequestSampler | None = None) -> list[int]:
        out = []
        for _ in range(16):
            out.append(int(sampler(x)[0]))
            if neighbour is not None:
                neighbour(x)
        return out

    alone = tokens(RequestSampler(params, draw=draw))
    beside = tokens(
        RequestSampler(params, draw=draw),
        RequestSampler(SamplingParams(temperature=1.0, seed=7), draw=draw),
    )
    unseeded_beside = tokens(
        RequestSampler(params, draw=draw), RequestSampler(SamplingParams(), draw=draw)
    )
    assert alone == beside == unseeded_beside
    assert alone != tokens(
        RequestSampler(SamplingParams(temperature=0.9, top_p=0.95, seed=43), draw=draw)
    )
    rows = mx.concatenate([_row(4096, 3.0, s) for s in range(5)])
    words = mx.random.split(mx.random.key(9), 5)
    filters = RequestSampler(SamplingParams(top_k=50, min_p=0.01)).filters
    batched = np.array(draw(rows, words, filters, 1.0))
    single = [int(draw(rows[i : i + 1], words[i : i + 1], filters, 1.0)[0]) for i in range(5)]
    assert batched.tolist() == single


def test_model_load_routes_the_models_samplers_to_the_kernel(monkeypatch) -> None:
    from vllm_mlx.engine import sampling as engine_sampling
    from vllm_mlx.native.sampling import route_sampling

    model, older, other = nn.Linear(2, 2), nn.Linear(2, 2), nn.Linear(2, 2)
    route_sampling(model)
    assert engine_sampling.numerics_of(model).draw is draw
    assert engine_sampling.numerics_of(model).logsumexp is native.logsumexp
    assert engine_sampling.numerics_of(other) is engine_sampling.MLX_OPS  # not loaded natively
    monkeypatch.setattr(native, "provides", lambda kernel: False)  # an older build
    route_sampling(older)
    assert engine_sampling.numerics_of(older).draw is None


def test_a_temperature_near_zero_draws_the_top_token(isa) -> None:
    """1 / 1e-40 overflows float32; the draw is then the argmax of the kept tokens."""
    x = _row(4096, 3.0, 12)
    for seed in range(3):
        sampler = RequestSampler(SamplingParams(temperature=1e-40, top_p=0.9, seed=seed), draw=draw)
        assert int(sampler(x)[0]) == int(mx.argmax(x, axis=-1)[0])
