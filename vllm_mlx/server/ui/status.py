"""What the status view shows, read from the same objects ``/metrics`` renders: the engine's
queue and batch sizes and the server's Prometheus counters and histograms.

Counters are cumulative, so "tokens per second over the last minute" needs a history: each
server keeps a small window of (time, tokens generated) samples, taken whenever a UI page or
the status is read (at most once a second) and starting from the counter's creation (zero
tokens when the server started). The rate is the change across the window, reported with
the span it really covers: until the view has polled for a minute that span is longer (since
start-up or the last read) or shorter than a minute.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from prometheus_client.metrics import MetricWrapperBase

from ..ops.metrics import ServerMetrics
from ..state import ServerState

RATE_WINDOW_S = 60.0
SAMPLE_EVERY_S = 1.0


def metric_total(metric: MetricWrapperBase, suffix: str = "") -> float:
    """Sum of a metric's samples named ``<name><suffix>`` over all its label values."""
    total = 0.0
    for family in metric.collect():
        for sample in family.samples:
            if sample.name == family.name + suffix:
                total += sample.value
    return total


class TokenRate:
    """Tokens per second over a sliding window, from a cumulative counter read on demand."""

    def __init__(
        self,
        read: Callable[[], float],
        since: float | None = None,
        window: float = RATE_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``since``: the ``clock`` time at which the counter was zero, if known."""
        self.read, self.window, self.clock = read, window, clock
        self.samples: deque[tuple[float, float]] = deque([(since, 0.0)] if since else [])
        self.lock = threading.Lock()

    def sample(self) -> dict:
        """Record the counter now (at most once per ``SAMPLE_EVERY_S``); the rate since the
        newest sample at least a window old (else the oldest), and the seconds it spans."""
        now, value = self.clock(), self.read()
        with self.lock:
            if not self.samples or now - self.samples[-1][0] >= SAMPLE_EVERY_S:
                self.samples.append((now, value))
            while len(self.samples) > 1 and now - self.samples[1][0] >= self.window:
                self.samples.popleft()
            first_time, first_value = self.samples[0]
        span = now - first_time
        rate = (value - first_value) / span if span > 0 else 0.0
        return {"tokens_per_s": round(rate, 2), "window_s": round(span, 1)}


def _ratio(part: float, whole: float) -> float | None:
    return round(part / whole, 4) if whole else None


def _mean_ms(metric: MetricWrapperBase) -> float | None:
    count = metric_total(metric, "_count")
    return round(metric_total(metric, "_sum") / count * 1000, 1) if count else None


def status_data(state: ServerState, rate: TokenRate) -> dict:
    """The status view's figures (``GET /v1/status``)."""
    metrics: ServerMetrics = state.metrics
    pool = state.models
    pipeline = pool.default_pipeline()  # the default model's parsers, when it is loaded
    finished = metric_total(metrics.finished, "_total")
    prompt_tokens = metric_total(metrics.prompt_tokens, "_total")
    return {
        "models": [
            {"id": slot.entry.name, "max_model_len": slot.pipeline.context_length}
            for slot in pool.loaded()
        ],
        "parsers": {
            "reasoning": pipeline.reasoning_format.name
            if pipeline and pipeline.reasoning_format
            else None,
            "tool_calls": pipeline.tool_format.name if pipeline and pipeline.tool_format else None,
            "structured_output": pipeline.structured_backend if pipeline else None,
        },
        "queue_depth": pool.queue_depth(),
        "running": pool.running(),
        "requests_in_flight": int(metric_total(metrics.in_flight)),
        "generations_finished": int(finished),
        "prompt_tokens": int(prompt_tokens),
        "completion_tokens": int(metric_total(metrics.completion_tokens, "_total")),
        "prefix_cache": {
            "hit_requests": int(metric_total(metrics.cache_hits, "_total")),
            "hit_tokens": int(metric_total(metrics.cached_tokens, "_total")),
            "request_hit_rate": _ratio(metric_total(metrics.cache_hits, "_total"), finished),
            "token_hit_rate": _ratio(metric_total(metrics.cached_tokens, "_total"), prompt_tokens),
        },
        "last_minute": rate.sample(),
        "ttft_mean_ms": _mean_ms(metrics.ttft),
        "itl_mean_ms": _mean_ms(metrics.itl),
        "mcp": state.mcp.status() if state.mcp is not None else None,
        "api_key_required": state.api_key is not None,
    }


def tokens_generated(metrics: ServerMetrics) -> float:
    """Tokens generated so far, as early as the metrics know them. ``completion_tokens``
    grows only when a request ends; a stream's tokens are seen one by one as the TTFT and
    inter-token histograms' observations (one per token). The larger of the two is right
    for streamed-only or non-streamed-only traffic and a lower bound for a mix."""
    streamed = metric_total(metrics.ttft, "_count") + metric_total(metrics.itl, "_count")
    return max(metric_total(metrics.completion_tokens, "_total"), streamed)


def completion_rate(metrics: ServerMetrics) -> TokenRate:
    """The last-minute rate of one server's generated tokens, counted from its start (the
    counter's ``_created`` sample, in wall-clock time, moved onto the monotonic clock)."""
    created = metric_total(metrics.completion_tokens, "_created")
    since = time.monotonic() - (time.time() - created) if created else None
    return TokenRate(lambda: tokens_generated(metrics), since)
