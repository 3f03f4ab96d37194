"""Prometheus metrics for one server: a registry per app (so tests and embedders can build
several apps in one process), the per-request latency tracker every API handler feeds, and
the ``/metrics`` endpoint.

Handlers see the pipeline's ``ChatEvent`` stream, not the engine's tokens. Each non-terminal
event stands for one engine chunk, i.e. one generated token, which is what TTFT and the
inter-token latency are measured on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily
from starlette.requests import Request
from starlette.responses import Response

if TYPE_CHECKING:
    from ...fleet.pool import ModelPool
    from ...pipeline import ChatEvent, ChatResult, Pipeline, Usage

# Seconds. TTFT spans queueing and prefill, which on a CPU can take minutes for long prompts.
LOAD_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
ITL_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5)


class _Speculation:
    """vllm_mlx_spec_draft_tokens_total / vllm_mlx_spec_accepted_tokens_total, read from
    the engine's source (which counts them) at scrape time."""

    def __init__(self, read: Callable[[], tuple[int, int]]) -> None:
        self.read = read

    def collect(self):
        drafted, accepted = self.read()
        yield CounterMetricFamily(
            "vllm_mlx_spec_draft_tokens", "Draft tokens proposed (speculative decoding)", drafted
        )
        yield CounterMetricFamily(
            "vllm_mlx_spec_accepted_tokens", "Draft tokens the target model accepted", accepted
        )


class ServerMetrics:
    """All of one server's metrics. Requests feed them through ``RequestMetrics`` (prefix-cache
    hits come from each request's usage, constraint give-ups from its terminal event or
    result); gauges read their source at scrape time (``watch_engine``, ``watch_mcp``)."""

    def __init__(self, namespace: str = "vllm_mlx") -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r, ns = self.registry, namespace
        self.requests = Counter(
            "requests", "HTTP requests answered", ["route", "status"], namespace=ns, registry=r
        )
        self.in_flight = Gauge(
            "requests_in_flight", "HTTP requests being answered", namespace=ns, registry=r
        )
        self.queue_depth = Gauge(
            "queue_depth", "Generation requests waiting for the engine", namespace=ns, registry=r
        )
        self.running = Gauge(
            "requests_running",
            "Generation requests in the running batch",
            namespace=ns,
            registry=r,
        )
        self.ttft = Histogram(
            "time_to_first_token_seconds",
            "From the request reaching its handler to its first generated token",
            namespace=ns,
            registry=r,
            buckets=TTFT_BUCKETS,
        )
        self.itl = Histogram(
            "inter_token_latency_seconds",
            "Time between consecutive generated tokens of one stream",
            namespace=ns,
            registry=r,
            buckets=ITL_BUCKETS,
        )
        self.prompt_tokens = Counter(
            "prompt_tokens", "Prompt tokens processed", namespace=ns, registry=r
        )
        self.completion_tokens = Counter(
            "completion_tokens", "Tokens generated", namespace=ns, registry=r
        )
        self.finished = Counter(
            "generations_finished",
            "Generations by finish reason (stop, length, tool_calls, cancelled, error)",
            ["finish_reason"],
            namespace=ns,
            registry=r,
        )
        self.cache_hits = Counter(
            "prefix_cache_hits",
            "Requests whose prompt prefix came from the cache",
            namespace=ns,
            registry=r,
        )
        self.cached_tokens = Counter(
            "prefix_cache_hit_tokens",
            "Prompt tokens served from the prefix cache",
            namespace=ns,
            registry=r,
        )
        self.constraint_give_ups = Counter(
            "constraint_give_ups",
            "Generations whose output constraint gave up mid-generation (output unconstrained"
            " from there)",
            namespace=ns,
            registry=r,
        )
        self.mcp_servers_up = Gauge(
            "mcp_servers_up", "Connected MCP servers", namespace=ns, registry=r
        )
        self.models_loaded = Gauge("models_loaded", "Models loaded", namespace=ns, registry=r)
        self.model_load_seconds = Histogram(
            "model_load_seconds",
            "Time to load a model (weights, parsers, engine)",
            ["model"],
            namespace=ns,
            registry=r,
            buckets=LOAD_BUCKETS,
        )
        self.model_evictions = Counter(
            "model_evictions",
            "Models unloaded, by reason (lru, memory, ttl, operator)",
            ["model", "reason"],
            namespace=ns,
            registry=r,
        )

    def watch_engine(
        self,
        queue_depth: Callable[[], float],
        running: Callable[[], float],
        speculation: Callable[[], tuple[int, int]] | None = None,
    ) -> None:
        """Read the engine's queue and batch sizes (and speculative-decoding totals) at scrape
        time, so they are never stale."""
        self.queue_depth.set_function(queue_depth)
        self.running.set_function(running)
        if speculation is not None:
            self.registry.register(_Speculation(speculation))

    def watch_models(self, pool: ModelPool) -> None:
        """Hear the pool's loads and unloads; every pipeline it loads counts its cancelled
        generations here (the models loaded before the app are counted now)."""

        def adopt(pipeline: Pipeline) -> None:
            pipeline.on_cancelled = self.count_cancelled

        pool.events.loaded = lambda name, seconds: self.model_load_seconds.labels(name).observe(
            seconds
        )
        pool.events.evicted = lambda name, reason: self.model_evictions.labels(name, reason).inc()
        pool.events.pipeline = adopt
        for slot in pool.loaded():
            adopt(slot.pipeline)
            if slot.close is not None:
                self.model_load_seconds.labels(slot.entry.name).observe(slot.load_seconds)
        self.models_loaded.set_function(lambda: len(pool.loaded()))

    def watch_mcp(self, connected: Callable[[], float]) -> None:
        """Read the MCP manager's connected-server count at scrape time."""
        self.mcp_servers_up.set_function(connected)

    def count_cancelled(self, usage: Usage) -> None:
        """A generation whose client left before its end (the pipeline's ``on_cancelled``):
        counted as ``cancelled`` with the tokens it had cost."""
        self.finished.labels("cancelled").inc()
        self.prompt_tokens.inc(usage.prompt_tokens)
        self.completion_tokens.inc(usage.completion_tokens)

    def request(self) -> RequestMetrics:
        """A tracker for one generation request, started now."""
        return RequestMetrics(self)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class RequestMetrics:
    """Feeds one request's token timings and usage into its server's metrics.

    Streaming handlers pass every event to ``observe_event``; non-streaming ones pass the
    result to ``observe_result`` (usage only: they do not see token times).
    """

    def __init__(self, metrics: ServerMetrics) -> None:
        self.metrics = metrics
        self.started = time.perf_counter()
        self.last_token: float | None = None
        self.tokens_seen = 0
        self.done = False

    def observe_event(self, event: ChatEvent) -> None:
        if self.done:
            return
        terminal = event.finish_reason is not None
        # A terminal event is a token of its own (e.g. EOS) only when usage counts more
        # tokens than the events seen so far; otherwise it closes the previous token's chunk.
        new_token = not terminal or (
            event.usage is not None and event.usage.completion_tokens > self.tokens_seen
        )
        if new_token:
            self._token_at(time.perf_counter())
        if terminal:
            self._finish(event.finish_reason, event.usage, event.constraint_gave_up)

    def observe_result(self, result: ChatResult) -> None:
        if not self.done:
            self._finish(result.finish_reason, result.usage, result.constraint_gave_up)

    def _token_at(self, now: float) -> None:
        if self.last_token is None:
            self.metrics.ttft.observe(now - self.started)
        else:
            self.metrics.itl.observe(now - self.last_token)
        self.last_token = now
        self.tokens_seen += 1

    def _finish(
        self, finish_reason: str | None, usage: Usage | None, constraint_gave_up: str | None
    ) -> None:
        self.done = True
        self.metrics.finished.labels(finish_reason or "error").inc()
        if constraint_gave_up is not None:
            self.metrics.constraint_give_ups.inc()
        if usage is not None:
            self.metrics.prompt_tokens.inc(usage.prompt_tokens)
            self.metrics.completion_tokens.inc(usage.completion_tokens)
            if usage.cached_tokens:
                self.metrics.cache_hits.inc()
                self.metrics.cached_tokens.inc(usage.cached_tokens)


async def metrics_endpoint(request: Request) -> Response:
    """GET /metrics in the Prometheus text format."""
    metrics: ServerMetrics = request.app.state.vllm.metrics
    return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)
