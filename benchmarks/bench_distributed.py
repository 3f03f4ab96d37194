"""Sharded serving on one machine: decode tok/s for 1 vs 2 vs 3 local ranks, side by side.

    python benchmarks/bench_distributed.py [--model M] [--tokens 32] [--runs 2]

Each configuration is the real CLI server (`vllm-mlx serve --distributed MODE --ranks N`,
ring backend over loopback) answering the same greedy streamed completion; the table shows
time to first token, decode tok/s and the ratio to one rank. On one machine the ranks share
its cores and every token pays the collectives (tensor: two all-sums per layer; pipeline: a
send/recv per stage and an all-gather), so this measures the overhead; on several Macs the
point is memory per rank (docs/distributed.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from vllm_mlx.server.launch import launched_server

PROMPT = "Once upon a time, in a small village by the sea,"
# (mode, ranks): the embedded model's 9 heads / 3 KV heads split by tensor only over 3
CONFIGS = ((None, 1), ("pipeline", 2), ("pipeline", 3), ("tensor", 3))


def measure(base: str, tokens: int) -> tuple[float, float, int]:
    """(TTFT s, decode tok/s after the first token, tokens) of one streamed completion."""
    body = {
        "model": "m",
        "prompt": PROMPT,
        "max_tokens": tokens,
        "temperature": 0,
        "stream": True,
    }
    start = time.perf_counter()
    stamps: list[float] = []
    with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=900) as reply:
        for line in reply.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                if chunk["choices"] and chunk["choices"][0]["text"]:
                    stamps.append(time.perf_counter())
    if len(stamps) < 2:
        raise RuntimeError("the completion ended before a second token")
    return stamps[0] - start, (len(stamps) - 1) / (stamps[-1] - stamps[0]), len(stamps)


def rss_mb(pid: int) -> list[float]:
    """Resident memory of the server process and of its rank children (Linux /proc)."""
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        pids += [int(p) for p in children.read_text().split()]
    out = []
    for p in pids:
        status = Path(f"/proc/{p}/status")
        if status.exists():
            line = next(x for x in status.read_text().splitlines() if x.startswith("VmRSS"))
            out.append(int(line.split()[1]) / 1024)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="default: the embedded SmolLM2-135M")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode, ranks in CONFIGS:
            flags = ["--distributed", mode, "--ranks", str(ranks)] if mode else []
            log = Path(tmp) / f"{mode}-{ranks}.log"
            with launched_server(args.model, [*flags, "--prefix-cache-mb", "0"], log) as s:
                measure(s.base_url, 4)  # warm-up
                runs = [measure(s.base_url, args.tokens) for _ in range(args.runs)]
                memory = "/".join(f"{m:.0f}" for m in rss_mb(s.pid)) or "?"
            ttft = statistics.median(r[0] for r in runs)
            rate = statistics.median(r[1] for r in runs)
            rows.append((mode or "single", ranks, ttft, rate, memory))
            print(f"{mode or 'single'} x{ranks}: TTFT {ttft:.2f} s, {rate:.2f} tok/s", flush=True)
    base_rate = rows[0][3]
    print("\n| mode | ranks | TTFT (s) | decode tok/s | vs 1 rank | RSS per rank (MB) |")
    print("|---|---|---|---|---|---|")
    for mode, ranks, ttft, rate, memory in rows:
        print(
            f"| {mode} | {ranks} | {ttft:.2f} | {rate:.2f} | {rate / base_rate:.2f}x | {memory} |"
        )


if __name__ == "__main__":
    main()
