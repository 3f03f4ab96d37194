"""Prefill at agent lengths and a cached turn, through the real engine on the default model,
optionally side by side with another checkout's kernels (``--against /work/main``): each
round runs both trees in turn, each in a fresh process, so a shared machine's load drift
hits both alike.

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 \\
        python benchmarks/bench_long_prefill.py [--lengths 512,2048,4096,8192] [--rounds 2] \\
        [--prefix-cache on,off] [--against /work/main]

Reports, per tree and length: prefill tok/s (wall, and per CPU-second of this process: all
threads, which the machine's other work distorts far less), each as a ratio to its 2k value
(the target: 8k >= 0.7 of 2k), the resident-memory high-water mark during that prefill and
what it adds to the resident size at the prompt's start (what the process already held,
earlier prompts in the prefix cache among it, left out), MLX's own peak above its active
memory at the start, and the TTFT of 8 new tokens on a cached 2k prefix (wall and CPU), with
the load average. Each tree runs once with the prefix cache on and once off (no cached turn).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent


def _reset_peak_rss() -> None:
    """Start a new resident-memory high-water mark (Linux: clear_refs 5)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _status_mb(field: str) -> float:
    """A ``/proc/self/status`` size (``VmHWM``, ``VmRSS``) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def worker(
    lengths: list[int], prefix_tokens: int, suffix: int, prefix_cache: bool
) -> dict[str, Any]:
    """One round in this process: each length cold, then the cached turn."""
    import mlx.core as mx

    from vllm_mlx.engine.engine import Engine
    from vllm_mlx.engine.generation import GenerationRequest
    from vllm_mlx.engine.prefix_cache import PrefixCache
    from vllm_mlx.engine.sampling import SamplingParams
    from vllm_mlx.engine.sources import ModelBatchSource
    from vllm_mlx.models.loader import load_model

    rng = random.Random(0)
    loaded = load_model(None, progress=False)
    cache = PrefixCache(4 << 30) if prefix_cache else None
    engine = Engine(ModelBatchSource(loaded.model, prefix_cache=cache), loaded.tokenizer)

    def first_token(prompt: list[int]) -> tuple[float, float]:
        """(wall, CPU) seconds to the first streamed token of a 2-token greedy request (a
        1-token one would also pay for storing its cache before that token is out)."""
        wall, cpu = time.perf_counter(), time.process_time()
        request = GenerationRequest(prompt, SamplingParams(max_tokens=2, temperature=0))
        chunks = engine.generate_sync(request)
        next(chunks)
        first = time.perf_counter() - wall, time.process_time() - cpu
        for _ in chunks:
            pass
        return first

    def tokens(n: int) -> list[int]:
        return [rng.randrange(100, 49_000) for _ in range(n)]

    result: dict[str, Any] = {"kernels": loaded.kernels, "prefill": {}}
    try:
        first_token(tokens(64))  # warm-up
        for n in lengths:
            mx.clear_cache()  # freed buffers MLX keeps would hide what this prompt adds
            _reset_peak_rss()
            resident, active = _status_mb("VmRSS"), mx.get_active_memory()
            mx.reset_peak_memory()
            wall, cpu = first_token(tokens(n))
            peak = _status_mb("VmHWM")
            result["prefill"][n] = {
                "tok_s": n / wall,
                "tok_cpu_s": n / cpu,
                "peak_rss_mb": peak,
                "added_rss_mb": peak - resident,
                "added_mlx_mb": (mx.get_peak_memory() - active) / (1 << 20),
                "load": os.getloadavg()[0],
            }
        if not prefix_cache:
            return result
        prefix = tokens(prefix_tokens)
        first_token(prefix)
        turns = [first_token(prefix + tokens(suffix)) for _ in range(3)]
        result["cached_turn"] = {
            "wall_s": statistics.median(t[0] for t in turns),
            "cpu_s": statistics.median(t[1] for t in turns),
            "load": os.getloadavg()[0],
        }
    finally:
        engine.close()
    return result


def run_tree(
    tree: Path, lengths: list[int], prefix_tokens: int, suffix: int, prefix_cache: str
) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    args = [sys.executable, str(Path(__file__).resolve()), "--worker"]
    args += ["--lengths", ",".join(map(str, lengths)), "--prefix-tokens", str(prefix_tokens)]
    args += ["--suffix-tokens", str(suffix), "--prefix-cache", prefix_cache]
    out = subprocess.run(args, env=env, cwd=tree, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def summary(rounds: list[dict[str, Any]], lengths: list[int]) -> dict[str, Any]:
    """Medians over rounds, and each length's tok/s as a ratio to its 2k value."""
    table: dict[str, Any] = {}
    for n in lengths:
        cells = [r["prefill"][str(n)] for r in rounds]
        table[n] = {k: round(statistics.median(c[k] for c in cells), 1) for k in cells[0]}
    base = table.get(2048)
    if base:
        for row in table.values():
            row["tok_s_vs_2k"] = round(row["tok_s"] / base["tok_s"], 2)
            row["tok_cpu_s_vs_2k"] = round(row["tok_cpu_s"] / base["tok_cpu_s"], 2)
    turns = [r["cached_turn"] for r in rounds if "cached_turn" in r]
    cached = (
        {k: round(statistics.median(t[k] for t in turns), 3) for k in turns[0]} if turns else {}
    )
    return {"kernels": rounds[0]["kernels"], "prefill": table, "cached_turn": cached}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lengths", default="512,2048,4096,8192")
    parser.add_argument("--prefix-tokens", type=int, default=2048)
    parser.add_argument("--suffix-tokens", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prefix-cache", default="on,off", help="on, off or both (on,off)")
    parser.add_argument("--against", type=Path, help="another checkout to run side by side")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    lengths = [int(n) for n in args.lengths.split(",")]
    if args.worker:
        on = args.prefix_cache == "on"
        print(json.dumps(worker(lengths, args.prefix_tokens, args.suffix_tokens, on)))
        return
    trees = {"this": HERE} | ({"against": args.against.resolve()} if args.against else {})
    runs = [(name, mode) for mode in args.prefix_cache.split(",") for name in trees]
    rounds: dict[str, list[dict[str, Any]]] = {f"{n} cache {m}": [] for n, m in runs}
    for _ in range(args.rounds):
        for name, mode in runs:
            got = run_tree(trees[name], lengths, args.prefix_tokens, args.suffix_tokens, mode)
            rounds[f"{name} cache {mode}"].append(got)
            print(name, mode, json.dumps(got), file=sys.stderr, flush=True)
    report: dict[str, Any] = {name: summary(r, lengths) for name, r in rounds.items()}
    if args.against and "this cache on" in report and "against cache on" in report:
        ours, theirs = report["this cache on"], report["against cache on"]
        report["this_over_against"] = {
            "prefill_tok_cpu_s": {
                n: round(ours["prefill"][n]["tok_cpu_s"] / theirs["prefill"][n]["tok_cpu_s"], 2)
                for n in lengths
            },
            "cached_turn_cpu_s": round(
                ours["cached_turn"]["cpu_s"] / theirs["cached_turn"]["cpu_s"], 2
            ),
        }
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
