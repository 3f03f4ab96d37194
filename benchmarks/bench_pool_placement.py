"""Decode steps at 1, 4 and 8 rows under each placement of the kernels' pool workers
(``native.set_placement``: "kernel", "apart", "auto"), alternating in one process, with
wall and process CPU per step and each thread's time on a CPU and queued for one.

    python benchmarks/bench_pool_placement.py [--rows 1,4,8] [--rounds 4] [--steps 30]

Each measurement starts a fresh batch (``ModelBatchSource``, the server's source: default
model, context 128 + 7 per stream, each stream sampled at T = 0.8 with its own seed), so
the kernel's placement of a worker it has just woken is what the "kernel" rows measure.
Per-thread times come from ``/proc/self/task/*/schedstat``: ``run`` is time on a CPU,
``queued`` time runnable but waiting for one (a worker queued behind the caller on the
caller's CPU shows there while the other CPU idles). Medians over the rounds; the machine
is shared, so the load average is printed, and ``cores`` (CPU / wall) and the per-thread
times say more than wall time alone when it is busy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import mlx.core as mx

from vllm_mlx import native
from vllm_mlx.engine.sampling import SamplingParams, make_sampler
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.models import load_model

PLACEMENTS = ("kernel", "apart", "auto")


def thread_times() -> dict[int, tuple[str, int, int]]:
    """tid -> (name, ns on a CPU, ns runnable and queued) for this process's threads."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                run, queued, _ = map(int, f.read().split())
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:  # the thread ended meanwhile
            continue
        out[int(tid)] = (name, run, queued)
    return out


def measure(model, rows: int, steps: int) -> dict[str, float]:
    """Per decode step of `rows` streams: wall and CPU ms, and per role (the caller
    thread, the pool's workers, MLX's stream thread) ms on a CPU and queued."""
    source = ModelBatchSource(model, max_num_seqs=8)
    for s in range(rows):
        prompt = [(37 * i + 11 * s) % 30000 + 100 for i in range(128 + 7 * s)]
        params = SamplingParams(temperature=0.8, seed=1000 + s)
        source.insert(prompt, sampler=make_sampler(params), processors=[], max_tokens=10**6)
    decoding: set[int] = set()
    while len(decoding) < rows:
        produced, _ = source.step()
        decoding.update(s.uid for s in produced)
    for _ in range(3):
        source.step()
    before, wall, cpu = thread_times(), time.perf_counter(), time.process_time()
    for _ in range(steps):
        source.step()
    out = {
        "wall": (time.perf_counter() - wall) / steps * 1e3,
        "cpu": (time.process_time() - cpu) / steps * 1e3,
    }
    after = thread_times()
    main = os.getpid()
    for role in ("caller", "pool", "mlx"):
        out[f"{role} run"] = out[f"{role} queued"] = 0.0
    for tid, (name, run, queued) in after.items():
        if tid not in before:
            continue
        role = "caller" if tid == main else "pool" if name == "vmlx-pool" else "mlx"
        out[f"{role} run"] += (run - before[tid][1]) / steps / 1e6
        out[f"{role} queued"] += (queued - before[tid][2]) / steps / 1e6
    source.reset()
    mx.clear_cache()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,4,8")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    rows = [int(n) for n in args.rows.split(",")]
    loaded = load_model(None, cpu_weights="quantized", progress=False)
    print(loaded.kernels, "| pool threads:", native.status()["threads"])
    results: dict[tuple[str, int], list[dict[str, float]]] = {
        (p, n): [] for p in PLACEMENTS for n in rows
    }
    loads = []
    for r in range(args.rounds):
        order = PLACEMENTS if r % 2 == 0 else PLACEMENTS[::-1]
        for n in rows:
            for placement in order:
                native.set_placement(placement)
                results[(placement, n)].append(measure(loaded.model, n, args.steps))
        loads.append(os.getloadavg()[0])
    native.set_placement("auto")
    print(f"{args.rounds} rounds of {args.steps} steps, load {min(loads):.1f}-{max(loads):.1f}")
    for n in rows:
        for placement in PLACEMENTS:
            got = results[(placement, n)]
            med = {key: statistics.median(g[key] for g in got) for key in got[0]}
            threads = ", ".join(
                f"{role} {med[f'{role} run']:.2f}/{med[f'{role} queued']:.2f}"
                for role in ("caller", "mlx", "pool")
            )
            print(
                f"{n} rows, {placement:6s}: {n * 1e3 / med['wall']:6.1f} tok/s, wall "
                f"{med['wall']:6.2f} ms, CPU {med['cpu']:6.2f} ms, cores "
                f"{med['cpu'] / med['wall']:.2f}; ms on a CPU / queued: {threads}"
            )


if __name__ == "__main__":
    main()
