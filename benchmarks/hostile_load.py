"""A bounded hostile-load run against the real CLI server (replay mode, loopback only): what
holds while clients misbehave. Phases, each bounded in count and time:

  baseline        /health alone
  half-open       N sockets send part of a request's headers and wait
  descriptors     more half-sent sockets (heads and bodies) than the server has descriptors,
                  against a second server started with --open-files as its fd limit
  disconnect      N streams cut after their first bytes, C at a time
  over-queue      N streams at once against --max-queue/--max-num-seqs (statuses counted)
  big-prompt      three 1.9 M-character prompts prepared at once (decode, render, tokenize)

For each: /health latency p50/p99/max (polled every 50 ms from its own thread), /health
failures, 5xx answers, and whether the process is still alive.

    python benchmarks/hostile_load.py [--half-open 300] [--storm 200] [--streams 40]
        [--open-files 1024 --idle 1300]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx

from vllm_mlx.server.launch import launched_server

HI = [{"role": "user", "content": "hi"}]


class Probe:
    """/health latencies from a thread while a phase runs."""

    def __init__(self, base: str, interval: float = 0.05):
        self.base, self.interval = base, interval
        self.latencies: list[float] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self._stop.is_set():
                start = time.perf_counter()
                try:
                    ok = client.get(self.base + "/health").status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.latencies.append((time.perf_counter() - start) * 1000)
                self.failures += not ok
                self._stop.wait(self.interval)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def summary(self) -> dict:
        values = sorted(self.latencies) or [0.0]
        p99 = (
            statistics.quantiles(values, n=100, method="inclusive")[98]
            if len(values) > 1
            else values[0]
        )
        return {
            "health_probes": len(self.latencies),
            "health_failures": self.failures,
            "health_p50_ms": round(statistics.median(values), 1),
            "health_p99_ms": round(p99, 1),
            "health_max_ms": round(values[-1], 1),
        }


def baseline(base: str, opts) -> dict:
    time.sleep(2)
    return {}


def _hold(base: str, heads: list[bytes], hold: float) -> dict:
    """One socket per head, each sent and then held open ``hold`` seconds: how many opened,
    how many the server refused, how many it closed meanwhile."""
    host, port = base.removeprefix("http://").split(":")
    sockets, refused = [], 0
    for head in heads:
        try:
            s = socket.create_connection((host, int(port)), timeout=5)
            s.sendall(head)
            sockets.append(s)
        except OSError:
            refused += 1
    time.sleep(hold)
    closed_by_server = 0
    for s in sockets:
        s.setblocking(False)
        try:
            closed_by_server += s.recv(1) == b""
        except BlockingIOError:
            pass
        except OSError:
            closed_by_server += 1
        s.close()
    return {"opened": len(sockets), "refused": refused, "closed_by_server": closed_by_server}


def half_open(base: str, opts) -> dict:
    """Sockets that send part of the headers and then nothing."""
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le"
    return _hold(base, [head] * opts.half_open, opts.hold)


BODY_START = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"model'
)


def descriptors(base: str, opts) -> dict:
    """--idle sockets, half inside the head and half inside the body, all held open."""
    heads = [BODY_START if i % 2 else b"GET /health HTTP/1.1\r\nHost: 12" for i in range(opts.idle)]
    return {"fd_limit": opts.open_files, **_hold(base, heads, opts.hold)}


def _stream_cut(base: str, statuses: Counter) -> None:
    body = {"model": "m", "messages": HI, "max_tokens": 400, "stream": True}
    try:
        with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=60) as r:
            statuses[r.status_code] += 1
            for _ in r.iter_bytes():
                break  # leave after the first bytes
    except httpx.HTTPError:
        statuses["transport-error"] += 1


def _in_threads(count: int, concurrency: int, work: Callable[[], None]) -> None:
    done = threading.Semaphore(concurrency)

    def run() -> None:
        try:
            work()
        finally:
            done.release()

    threads = []
    for _ in range(count):
        done.acquire()
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join(timeout=120)


def disconnect_storm(base: str, opts) -> dict:
    statuses: Counter = Counter()
    _in_threads(opts.storm, 20, lambda: _stream_cut(base, statuses))
    return {"streams": opts.storm, "statuses": dict(statuses)}


def _stream_whole(base: str, statuses: Counter, endings: Counter) -> None:
    body = {"model": "m", "messages": HI, "max_tokens": 400, "stream": True}
    try:
        with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=120) as r:
            statuses[r.status_code] += 1
            lines = [line for line in r.iter_lines() if line.startswith("data: ")]
            if r.status_code == 200:
                endings["[DONE]" if lines and lines[-1] == "data: [DONE]" else "cut"] += 1
                endings["in-band error"] += any('"error"' in line for line in lines)
    except httpx.HTTPError:
        statuses["transport-error"] += 1


def over_queue(base: str, opts) -> dict:
    statuses: Counter = Counter()
    endings: Counter = Counter()
    _in_threads(opts.streams, opts.streams, lambda: _stream_whole(base, statuses, endings))
    return {"streams": opts.streams, "statuses": dict(statuses), "endings": dict(endings)}


def big_prompt(base: str, opts) -> dict:
    words = "word " * 380_000
    body = json.dumps(
        {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": words}]}
    )
    statuses: Counter = Counter()
    started = time.perf_counter()

    def one() -> None:
        reply = httpx.post(
            f"{base}/v1/messages/count_tokens",
            content=body,
            headers={"content-type": "application/json"},
            timeout=300,
        )
        statuses[reply.status_code] += 1

    _in_threads(3, 3, one)
    return {"statuses": dict(statuses), "seconds": round(time.perf_counter() - started, 2)}


PHASES = {
    "baseline": baseline,
    "half-open": half_open,
    "disconnect": disconnect_storm,
    "over-queue": over_queue,
    "big-prompt": big_prompt,
}


def fives(report: dict) -> int:
    return sum(v for k, v in report.get("statuses", {}).items() if isinstance(k, int) and k >= 500)


def alive(pid: int, base: str) -> bool:
    try:
        os.kill(pid, 0)
        return httpx.get(f"{base}/health", timeout=10).status_code == 200
    except (OSError, httpx.HTTPError):
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--half-open", type=int, default=300)
    parser.add_argument("--hold", type=float, default=5.0, help="seconds half-open sockets wait")
    parser.add_argument("--storm", type=int, default=200)
    parser.add_argument("--streams", type=int, default=40)
    parser.add_argument("--max-queue", type=int, default=8)
    parser.add_argument("--max-num-seqs", type=int, default=4)
    parser.add_argument("--open-files", type=int, default=1024, help="fd limit, descriptors")
    parser.add_argument("--idle", type=int, default=1300, help="sockets held, descriptors")
    opts = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 2 * opts.idle + 256)), hard))
    with tempfile.TemporaryDirectory() as tmp:
        replay = Path(tmp) / "replay.txt"
        replay.write_text("word " * 400)
        args = ["--replay", str(replay), "--max-queue", str(opts.max_queue)]
        args += ["--max-num-seqs", str(opts.max_num_seqs), "--log-level", "warning"]
        with launched_server(None, args, Path(tmp) / "server.log", timeout=300) as server:
            for name, phase in PHASES.items():
                with Probe(server.base_url) as probe:
                    report = phase(server.base_url, opts)
                report |= probe.summary()
                report["5xx"] = fives(report)
                report["alive"] = alive(server.pid, server.base_url)
                print(json.dumps({"phase": name, **report}), flush=True)
        log = Path(tmp) / "server-fd.log"
        with launched_server(None, args, log, timeout=300, open_files=opts.open_files) as server:
            with Probe(server.base_url) as probe:
                report = descriptors(server.base_url, opts)
            report |= probe.summary()
            report["emfile_logged"] = log.read_text().count("Too many open files")
            report["alive"] = alive(server.pid, server.base_url)
            print(json.dumps({"phase": "descriptors", **report}), flush=True)


if __name__ == "__main__":
    main()
