"""Aggregate decode tokens/s of 1, 2, 4 and 8 streams on the default model, through the
server's own batch source (``ModelBatchSource``: mlx-lm's ``BatchGenerator``, the one-node
decode step, each request's own sampler), as ratios to one stream, greedy and sampled
(temperature 0.8, each stream its own seed), in one run.

    python benchmarks/bench_batched_decode.py [--context 128] [--tokens 48] [--rounds 2]

Each stream's prompt has its own length (``context`` + 7 * stream), so the batch is
left-padded as a server's is. Rounds alternate the batch sizes; each size's best round
counts (the machine is shared: the load average is printed with the numbers). Tokens per
second of the process's CPU time are printed too: on a loaded machine they show the work
a token costs, which wall time hides behind other processes' turns. Compare
trees side by side with ``PYTHONPATH=<tree>``; ``--packed-ab`` alternates the products on
and off packed weight copies (``native.set_packed``) within each round.
"""

from __future__ import annotations

import argparse
import os
import time

import mlx.core as mx

from vllm_mlx import native
from vllm_mlx.engine.sampling import SamplingParams, make_sampler
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.models import load_model

STREAMS = (1, 2, 4, 8)


def decode_rate(
    model, streams: int, context: int, tokens: int, temperature: float
) -> tuple[float, float]:
    """Tokens per second of wall time and per second of the process's CPU time over every
    stream once all are decoding (the prefills are not timed)."""
    source = ModelBatchSource(model, max_num_seqs=max(STREAMS))
    for s in range(streams):
        prompt = [(37 * i + 11 * s) % 30000 + 100 for i in range(context + 7 * s)]
        params = SamplingParams(temperature=temperature, seed=1000 + s)
        source.insert(prompt, sampler=make_sampler(params), processors=[], max_tokens=10**6)
    decoding: set[int] = set()
    while len(decoding) < streams:  # prefill, then every stream's first tokens
        steps, _ = source.step()
        decoding.update(s.uid for s in steps)
    for _ in range(2):
        source.step()
    start, cpu, produced = time.perf_counter(), time.process_time(), 0
    while produced < tokens * streams:
        steps, _ = source.step()
        produced += len(steps)
    rates = produced / (time.perf_counter() - start), produced / (time.process_time() - cpu)
    source.reset()
    mx.clear_cache()
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=48, help="tokens per stream timed")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--packed-ab", action="store_true", help="packed weights off and on")
    args = parser.parse_args()
    loaded = load_model(None, cpu_weights="quantized", progress=False)
    print(loaded.kernels)
    modes = (False, True) if args.packed_ab else (native.packed_mode() != "0",)
    for label, temperature in (("greedy", 0.0), ("sampled T=0.8", 0.8)):
        wall: dict[tuple[bool, int], float] = {}
        cpu: dict[tuple[bool, int], float] = {}
        for _ in range(args.rounds):
            for n in STREAMS:
                for packed in modes:
                    if args.packed_ab:  # else the process's own mode
                        native.set_packed(packed)
                    rate, per_cpu = decode_rate(
                        loaded.model, n, args.context, args.tokens, temperature
                    )
                    wall[packed, n] = max(wall.get((packed, n), 0.0), rate)
                    cpu[packed, n] = max(cpu.get((packed, n), 0.0), per_cpu)
        for packed in modes:
            for what, best in (("wall", wall), ("CPU", cpu)):
                one = best[packed, 1]
                row = ", ".join(
                    f"{n}: {best[packed, n]:.1f} ({best[packed, n] / one:.2f}x)" for n in STREAMS
                )
                print(
                    f"{label}{', packed' if packed else ''}, tokens/s of {what} time: {row}; "
                    f"load {os.getloadavg()[0]:.1f}"
                )


if __name__ == "__main__":
    main()
