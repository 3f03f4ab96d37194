"""Time to first token with and without a prefix-cache hit, side by side in one run.

    python benchmarks/bench_prefix_cache.py [--prefix-tokens 2048] [--rounds 3]

Against one `vllm-mlx serve` on the default model: a *miss* sends a fresh random prefix of
``--prefix-tokens`` token ids plus a short suffix; a *hit* resends the previous prefix with a
different suffix (what an agent does every turn). Reports TTFT medians, their ratio (target:
hit <= 0.3x miss) and the cached token counts the server reported.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from vllm_mlx.server.launch import launched_server


def first_token(base: str, prompt: list[int]) -> tuple[float, int]:
    """(seconds to the first streamed text, cached prompt tokens reported in usage)."""
    body = {
        "model": "x",
        "prompt": prompt,
        "max_tokens": 4,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start, ttft, cached = time.perf_counter(), None, 0
    with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=None) as response:
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if ttft is None and any(c.get("text") for c in chunk.get("choices", [])):
                ttft = time.perf_counter() - start
            if chunk.get("usage"):
                cached = chunk["usage"]["prompt_tokens_details"]["cached_tokens"]
    return ttft if ttft is not None else time.perf_counter() - start, cached


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prefix-tokens", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rng = random.Random(0)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(100, 49_000) for _ in range(n)]

    misses, hits, cached = [], [], []
    log = Path(tempfile.mkdtemp()) / "server.log"
    with launched_server(None, [], log) as server:
        base = server.base_url
        first_token(base, tokens(16))  # warm-up
        for _ in range(args.rounds):
            prefix = tokens(args.prefix_tokens)
            miss, _ = first_token(base, prefix + tokens(8))
            hit, n = first_token(base, prefix + tokens(8))
            misses.append(miss)
            hits.append(hit)
            cached.append(n)
            print(f"miss {miss:.2f} s   hit {hit:.2f} s   cached {n} tokens", file=sys.stderr)
    result = {
        "prefix_tokens": args.prefix_tokens,
        "rounds": args.rounds,
        "ttft_miss_s": statistics.median(misses),
        "ttft_hit_s": statistics.median(hits),
        "ratio": statistics.median(hits) / statistics.median(misses),
        "cached_tokens": cached,
    }
    print(
        f"TTFT miss {result['ttft_miss_s']:.2f} s, hit {result['ttft_hit_s']:.2f} s, "
        f"hit/miss {result['ratio']:.3f}"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
