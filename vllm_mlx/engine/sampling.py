"""Per-request sampling parameters and the sampler / logits processors built from them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p, make_logits_processors

from ..protocols import LogitsProcessor

Sampler = Callable[[mx.array], mx.array]


@dataclass(frozen=True)
class Filters:
    """The filters a draw applies, mlx-lm's order and meaning; 0 (or 1 for ``top_p``): off."""

    top_p: float = 1.0
    min_p: float = 0.0
    top_k: int = 0


# (log-probabilities [B, V] float32, uint32 random words [B, 2], filters, 1 / temperature)
# -> uint32 tokens [B], the distribution of ``RequestSampler.logits``; None: MLX's ops.
Draw = Callable[[mx.array, mx.array, Filters, float], mx.array]
FLOAT32_MAX = 3.4028234663852886e38


@dataclass(frozen=True)
class Numerics:
    """The kernels a model's next-token rows are normalized (``logsumexp`` over the last
    axis, keeping it: [..., V] float32 -> [..., 1]) and drawn with; None: MLX's ops.

    A property of the model, not of the process: the native load gives a patched model its
    kernels (`give_numerics`) and a source steps under its model's (`computing_with`), so a
    seeded request's answer does not depend on what else the process loaded before.
    """

    draw: Draw | None = None
    logsumexp: Callable[[mx.array], mx.array] | None = None


MLX_OPS = Numerics()
_NUMERICS = "_vllm_mlx_numerics"
_stepping = threading.local()  # the numerics of the model the current thread steps


def give_numerics(model: Any, numerics: Numerics) -> None:
    """``model``'s rows are normalized and drawn with ``numerics`` (set at load)."""
    object.__setattr__(model, _NUMERICS, numerics)


def numerics_of(model: Any) -> Numerics:
    return getattr(model, _NUMERICS, MLX_OPS)


@contextmanager
def computing_with(numerics: Numerics) -> Iterator[None]:
    """Build this thread's graphs (mlx-lm's step, the samplers) with ``numerics``."""
    previous = current_numerics()
    _stepping.numerics = numerics
    try:
        yield
    finally:
        _stepping.numerics = previous


def current_numerics() -> Numerics:
    return getattr(_stepping, "numerics", MLX_OPS)


@dataclass
class SamplingParams:
    """The values a request is sampled with, every field decided: the engine's input.

    ``request.Sampling`` (what the client set, None: unset) resolves into this over the
    server's defaults, which are one of these too (``options.SamplingOptions`` over the
    model's own). The engine sits below requests and options, so it declares its own
    complete type rather than read theirs. Defaults match the OpenAI API's."""

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] = field(default_factory=dict)
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    logprobs: bool = False
    top_logprobs: int = 0


def log_normalize(logits: mx.array) -> mx.array:
    """``logits - logsumexp(logits)`` over the last axis, on the kernel mlx-lm's step uses
    for the model being stepped (so a verify pass's log-probabilities are decoding's bits)."""
    kernel = current_numerics().logsumexp
    if kernel is not None and logits.dtype == mx.float32 and logits.shape[-1] > 0:
        return logits - kernel(logits)
    return logits - mx.logsumexp(logits, axis=-1, keepdims=True)


class RequestSampler:
    """A request's sampler over log-probabilities. With a seed, the request owns its random
    key, so its samples do not depend on what other requests drew before it. Speculative
    decoding reads the distribution it samples from (``logits``) and draws with the same key.
    """

    def __init__(self, params: SamplingParams, draw: Draw | None = None):
        self.greedy = params.temperature == 0
        self._draw = draw
        self._filters: list[Callable[[mx.array], mx.array]] = []
        if 0 < params.top_p < 1.0:
            self._filters.append(lambda x: apply_top_p(x, params.top_p))
        if params.min_p > 0:
            self._filters.append(lambda x: apply_min_p(x, params.min_p))
        if params.top_k > 0:  # top_k >= V keeps every token (mlx-lm's op refuses it)
            top_k = params.top_k
            self._filters.append(lambda x: x if top_k >= x.shape[-1] else apply_top_k(x, top_k))
        self.filters = Filters(
            params.top_p if 0 < params.top_p < 1.0 else 1.0,
            max(params.min_p, 0.0),
            max(params.top_k, 0),
        )
        self._inv_temp = 0.0 if self.greedy else 1.0 / params.temperature
        self._key = mx.random.key(params.seed) if params.seed is not None else None

    def logits(self, logprobs: mx.array) -> mx.array:
        """Unnormalized log-weights of the distribution a sample is drawn from."""
        for f in self._filters:
            logprobs = f(logprobs)
        return logprobs * self._inv_temp

    @property
    def seeded(self) -> bool:
        """Whether the request owns its random key (its samples are reproducible)."""
        return self._key is not None

    @property
    def key(self) -> mx.array | None:
        """The request's random key now (None: unseeded)."""
        return self._key

    def restore_key(self, key: mx.array | None) -> None:
        """Go back to an earlier ``key`` (speculative decisions taken back)."""
        self._key = key

    def next_key(self) -> mx.array | None:
        if self._key is None:
            return None
        self._key, sub = mx.random.split(self._key)
        return sub

    def random_words(self, rows: int) -> mx.array:
        """uint32 ``[rows, 2]`` for a draw: 64 bits from the request's key (split like any
        MLX sampler's), or 48 from MLX's global generator for an unseeded request."""
        key = self.next_key()
        if key is not None:
            return mx.random.split(key, rows)
        return (mx.random.uniform(shape=(rows, 2)) * 4294967296.0).astype(mx.uint32)

    @property
    def inv_temp(self) -> float:
        return self._inv_temp

    def draw_kernel(self, numerics: Numerics) -> Draw | None:
        """The kernel this sampler draws with under ``numerics`` (None: MLX's ops)."""
        return self._draw or numerics.draw

    def __call__(self, logprobs: mx.array) -> mx.array:
        if self.greedy:
            return mx.argmax(logprobs, axis=-1)
        draw = self.draw_kernel(current_numerics())
        if draw is not None and logprobs.ndim == 2:
            rows = logprobs.astype(mx.float32)
            # a temperature near 0 (1e-40 passes the APIs' bounds) overflows float32's 1/T:
            # the largest float keeps the draw an argmax over the kept tokens
            inv_temp = min(self._inv_temp, FLOAT32_MAX)
            return draw(rows, self.random_words(rows.shape[0]), self.filters, inv_temp)
        return mx.random.categorical(self.logits(logprobs), key=self.next_key())


def make_sampler(params: SamplingParams) -> RequestSampler:
    return RequestSampler(params)


class LogitBias:
    """An additive bias on some tokens (mlx-lm's logit-bias arithmetic: one float32 add per
    biased entry), as an object a batched step recognizes, so it adds every row's bias in
    one scatter instead of copying each row's logits out and back (``process_rows``)."""

    def __init__(self, bias: dict[int, float]):
        self.tokens = [int(t) for t in bias]
        self.values = [float(v) for v in bias.values()]
        self._indices = mx.array(self.tokens)
        self._added = mx.array(self.values)

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        return logits.at[:, self._indices].add(self._added)


def make_penalty_processors(params: SamplingParams) -> list[LogitsProcessor]:
    """Logit bias, then repetition, presence and frequency penalties (mlx-lm's order)."""
    bias: list[LogitsProcessor] = [LogitBias(params.logit_bias)] if params.logit_bias else []
    return bias + make_logits_processors(
        repetition_penalty=params.repetition_penalty or None,
        presence_penalty=params.presence_penalty or None,
        frequency_penalty=params.frequency_penalty or None,
    )


def process_rows(
    logits: mx.array, inputs: mx.array, processors: Sequence[Sequence[LogitsProcessor]], contexts
) -> tuple[mx.array, list[mx.array]]:
    """Each row's processors over ``logits`` [B, V] (``inputs`` [B]: the tokens just fed),
    as mlx-lm's batch step applies them row by row, with every row's leading ``LogitBias``
    added in one scatter. Each row's context (its tokens so far, a ``TokenBuffer`` in
    ``contexts``) takes its token whenever the row has processors. Returns the processed
    logits and the contexts updated."""
    updated: list[mx.array] = []
    if not any(processors):
        return logits, updated
    rows: list[int] = []
    columns: list[int] = []
    added: list[float] = []
    rest: list[tuple[int, mx.array, Sequence[LogitsProcessor]]] = []
    for e, own in enumerate(processors):
        if not own:
            continue
        context = contexts[e].update_and_fetch(inputs[e : e + 1])
        updated.append(context)
        if isinstance(own[0], LogitBias):
            rows += [e] * len(own[0].tokens)
            columns += own[0].tokens
            added += own[0].values
            own = own[1:]
        if own:
            rest.append((e, context, own))
    if rows:
        logits = logits.at[mx.array(rows), mx.array(columns)].add(mx.array(added))
    if rest:
        pieces = [logits[e : e + 1] for e in range(logits.shape[0])]
        for e, context, own in rest:
            for processor in own:
                pieces[e] = processor(context, pieces[e])
        logits = mx.concatenate(pieces, axis=0)
    return logits, updated


def sample_rows(samplers: Sequence[Sampler], logprobs: mx.array) -> mx.array:
    """Each row's token from its own sampler over ``logprobs`` [B, V], the rows that draw
    alike (greedy, or the same kernel, filters and temperature) in one call: every kernel
    decides a row from that row and its random words alone, so a row's token is the one
    its sampler gives it by itself. Random words are taken in row order."""
    groups: dict[Any, list[int]] = {}
    words: dict[Any, list[mx.array]] = {}
    alone: list[int] = []
    numerics = current_numerics()
    for e, sampler in enumerate(samplers):
        if isinstance(sampler, RequestSampler):
            if sampler.greedy:
                groups.setdefault("greedy", []).append(e)
                continue
            draw = sampler.draw_kernel(numerics)
            if draw is not None and logprobs.ndim == 2:
                key = (draw, sampler.filters, min(sampler.inv_temp, FLOAT32_MAX))
                groups.setdefault(key, []).append(e)
                words.setdefault(key, []).append(sampler.random_words(1))
                continue
        alone.append(e)
    batch = logprobs.shape[0]
    if len(groups) == 1 and not alone and len(next(iter(groups.values()))) == batch:
        ((key, _),) = groups.items()
        return _draw_group(key, logprobs, words.get(key))
    order: list[int] = []
    parts: list[mx.array] = []
    for key, members in groups.items():
        rows = logprobs[mx.array(members)]
        parts.append(_draw_group(key, rows, words.get(key)))
        order += members
    for e in alone:
        parts.append(samplers[e](logprobs[e : e + 1]))
        order.append(e)
    tokens = mx.concatenate(parts, axis=0)
    where = [0] * batch
    for position, e in enumerate(order):
        where[e] = position
    return tokens[mx.array(where)]


def _draw_group(key: Any, rows: mx.array, words: list[mx.array] | None) -> mx.array:
    if key == "greedy":
        return mx.argmax(rows, axis=-1)
    draw, filters, inv_temp = key
    assert words is not None
    bits = words[0] if len(words) == 1 else mx.concatenate(words, axis=0)
    return draw(rows.astype(mx.float32), bits, filters, inv_temp)
