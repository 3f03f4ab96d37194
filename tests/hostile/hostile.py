"""Shared by the hardening tests: raw requests (bytes, so lone surrogates and broken JSON
reach the server as a hostile client sends them), the error-shape check, stream endings,
and a /health probe that runs while hostile traffic does."""

from __future__ import annotations

import json
import statistics
import threading
import time
from dataclasses import dataclass, field

import httpx

ANTHROPIC_PATHS = ("/v1/messages", "/v1/messages/count_tokens")
TERMINAL = {
    "/v1/chat/completions": ("data: [DONE]",),
    "/v1/completions": ("data: [DONE]",),
    "/v1/messages": ("event: message_stop", "event: error"),
    "/v1/responses": (
        "event: response.completed",
        "event: response.incomplete",
        "event: response.failed",
    ),
}


def raw(body: object) -> bytes:
    """JSON as a client could send it: ASCII escapes, so ``"\\ud800"`` stays a lone
    surrogate escape, and NaN allowed (the server must refuse it, not us)."""
    return json.dumps(body, ensure_ascii=True, allow_nan=True).encode()


def post(base: str, path: str, body: bytes, timeout: float = 120) -> httpx.Response:
    return httpx.post(
        base + path, content=body, headers={"content-type": "application/json"}, timeout=timeout
    )


def check_answer(path: str, reply: httpx.Response, *, stream: bool = False) -> None:
    """A 2xx, or a 4xx in the API's own error shape; never a 5xx. A 200 stream ends with
    its protocol's terminal event."""
    assert reply.status_code < 500, (path, reply.status_code, reply.text[:300])
    if reply.status_code >= 400:
        body = reply.json()
        if path in ANTHROPIC_PATHS:
            assert body["type"] == "error", body
            assert isinstance(body["error"]["type"], str) and body["error"]["message"], body
        else:
            assert isinstance(body["error"]["message"], str) and body["error"]["message"], body
            assert isinstance(body["error"]["type"], str), body
        return
    if stream and path in TERMINAL:
        lines = [line for line in reply.text.splitlines() if line.strip()]
        tail = lines[-2:] if path in ("/v1/messages", "/v1/responses") else lines[-1:]
        assert any(line.startswith(TERMINAL[path]) for line in tail), (path, lines[-3:])


def error_param(reply: httpx.Response) -> str | None:
    return reply.json()["error"].get("param")


@dataclass
class HealthProbe:
    """Polls /health from a thread: every answer's (start, end, status)."""

    base: str
    interval: float = 0.05
    samples: list[tuple[float, float, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> HealthProbe:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self._stop.is_set():
                start = time.monotonic()
                try:
                    status = client.get(self.base + "/health").status_code
                except httpx.HTTPError:
                    status = 0
                self.samples.append((start, time.monotonic(), status))
                self._stop.wait(self.interval)

    def failures(self) -> list[tuple[float, float, int]]:
        return [s for s in self.samples if s[2] != 200]

    def answered_within(self, start: float, end: float) -> int:
        """Health answers that began and ended inside [start, end]."""
        return sum(1 for s, e, status in self.samples if status == 200 and start <= s and e <= end)

    def p99_ms(self) -> float:
        latencies = sorted((e - s) * 1000 for s, e, _ in self.samples)
        if len(latencies) < 2:
            return latencies[0] if latencies else 0.0
        return statistics.quantiles(latencies, n=100, method="inclusive")[98]
