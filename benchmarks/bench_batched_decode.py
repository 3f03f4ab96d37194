"""Decode through mlx-lm's ``BatchKVCache`` (the server's cache: per-sequence offsets,
padding masks) on the default model: wall and CPU ms per step.

    python benchmarks/bench_batched_decode.py [--context 128] [--steps 20]

Two sequences, the second left-padded by 5; compare trees with ``PYTHONPATH=<tree>``.
"""

from __future__ import annotations

import argparse
import os
import time

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache

from vllm_mlx.models import load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    loaded = load_model(None, cpu_weights="quantized", progress=False)
    model = loaded.model
    cache = [BatchKVCache(left_padding=[0, 5]) for _ in model.layers]
    prompt = mx.array([[i % 30000 + 100 for i in range(args.context)]] * 2)
    for start in range(0, args.context, 512):
        out = model(prompt[:, start : start + 512], cache=cache)
        mx.eval(out, [c.state for c in cache])
    token = mx.argmax(out[:, -1:], axis=-1)
    mx.eval(token)
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(args.steps):
        token = mx.argmax(model(token, cache=cache)[:, -1:], axis=-1)
        mx.eval(token)
    wall_ms = 1e3 * (time.perf_counter() - wall) / args.steps
    cpu_ms = 1e3 * (time.process_time() - cpu) / args.steps
    print(
        f"{loaded.kernels}\ncontext {args.context}, 2 sequences: wall {wall_ms:.1f} ms/step, "
        f"CPU {cpu_ms:.1f} ms/step, load {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
