"""A bounded soak test (not part of CI): mixed traffic against one server on loopback.

    python benchmarks/soak.py [--requests 300] [--concurrency 8] [--replay FILE]

Chat completions, Anthropic messages and Responses, streamed and not, some streams cancelled
mid-way, ``--concurrency`` at a time. Checks: no 5xx, every finished stream ended with its
protocol's terminal event, and the server's resident memory after the run is within 10% of
after a warm-up. Exits non-zero when a check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
from pathlib import Path

import httpx

from vllm_mlx.server.launch import launched_server

ASK = "Name a colour."
TERMINAL = {
    "chat": lambda line: line == "data: [DONE]",
    "messages": lambda line: line.startswith("event: message_stop"),
    "responses": lambda line: line.startswith(
        ("event: response.completed", "event: response.incomplete", "event: response.failed")
    ),
}
BODIES = {
    "chat": (
        "/v1/chat/completions",
        {"model": "x", "messages": [{"role": "user", "content": ASK}], "max_tokens": 8},
    ),
    "messages": (
        "/v1/messages",
        {"model": "x", "messages": [{"role": "user", "content": ASK}], "max_tokens": 8},
    ),
    "responses": ("/v1/responses", {"model": "x", "input": ASK, "max_output_tokens": 8}),
}


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


async def one(client: httpx.AsyncClient, base: str, rng: random.Random) -> dict:
    surface = rng.choice(list(BODIES))
    path, body = BODIES[surface]
    stream, cancel = rng.random() < 0.6, rng.random() < 0.15
    body = {**body, "stream": stream}
    if not stream:
        response = await client.post(base + path, json=body)
        return {"surface": surface, "status": response.status_code, "terminal": True}
    terminal = False
    async with client.stream("POST", base + path, json=body) as response:
        lines = 0
        async for line in response.aiter_lines():
            lines += 1
            terminal = terminal or TERMINAL[surface](line)
            if cancel and lines >= 3:
                break  # the client goes away mid-stream
    return {
        "surface": surface,
        "status": response.status_code,
        "terminal": terminal or cancel,
        "cancelled": cancel,
    }


async def run(base: str, requests: int, concurrency: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    gate = asyncio.Semaphore(concurrency)

    async def guarded(client):
        async with gate:
            return await one(client, base, rng)

    async with httpx.AsyncClient(timeout=300) as client:
        return await asyncio.gather(*(guarded(client) for _ in range(requests)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--replay", type=Path, help="serve a replayed output (no model cost)")
    args = parser.parse_args()
    serve_args = ["--replay", str(args.replay)] if args.replay else []
    log = Path(tempfile.mkdtemp()) / "server.log"
    with launched_server(None, serve_args, log) as server:
        base, pid = server.base_url, server.pid
        # warm-up: enough requests to fill the prefix cache to its entry bound (64)
        asyncio.run(run(base, 96, args.concurrency, seed=1))
        warm = rss_bytes(pid)
        results = asyncio.run(run(base, args.requests, args.concurrency, seed=2))
        after = rss_bytes(pid)
    errors = [r for r in results if r["status"] >= 500]
    unterminated = [r for r in results if not r["terminal"]]
    growth = after / warm - 1
    summary = {
        "requests": len(results),
        "5xx": len(errors),
        "unterminated": len(unterminated),
        "cancelled": sum(bool(r.get("cancelled")) for r in results),
        "rss_warm_mb": warm / 2**20,
        "rss_after_mb": after / 2**20,
        "rss_growth": growth,
    }
    print(json.dumps(summary, indent=2))
    if errors or unterminated or growth > 0.10:
        sys.exit(1)


if __name__ == "__main__":
    main()
