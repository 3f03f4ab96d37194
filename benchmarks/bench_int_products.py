"""What a row of x costs the integer products: int16 against int8 activations, side by side.

    VLLM_MLX_NATIVE_THREADS=1 python benchmarks/bench_int_products.py [--rounds 7]

Every quantized matmul of one decode step of the default model (its 210 layer
projections and the 8-bit output projection, ``native.quantized_matmul``) for 1, 2, 4
and 8 rows of x, under int16 and int8 activations (``native.set_activations``) on the
selected int16 body (VNNI where the CPU has it), the modes alternating in each round so
load drift hits both alike. Reports CPU ms per step (best and median; one thread makes
CPU time the work itself), the cost of each row past the first (from 1 to 8 rows), and
int8 / int16 ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from vllm_mlx import native
from vllm_mlx.models import load_model

MODES = ("int16", "int8")
ROWS = (1, 2, 4, 8)


def products(model: Any, rows: int) -> Callable[[], None]:
    """A callable running one decode step's quantized matmuls for ``rows`` rows of x."""
    layers = [m for _, m in model.named_modules() if isinstance(m, nn.QuantizedLinear)]
    embedding = model.model.embed_tokens
    width = {id(m): m.weight.shape[1] * 32 // m.bits for m in [*layers, embedding]}
    xs = {k: mx.random.normal((rows, k), key=mx.random.key(k)) for k in set(width.values())}
    mx.eval(list(xs.values()))
    calls = [
        (m.weight, m.scales, m.biases, m.group_size, m.bits, xs[width[id(m)]])
        for m in [*layers, embedding]
    ]

    def step() -> None:
        mx.eval(*[native.quantized_matmul(x, w, s, b, g, bits) for w, s, b, g, bits, x in calls])

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    model = load_model(None, cpu_weights="quantized", progress=False).model
    steps = {rows: products(model, rows) for rows in ROWS}
    cpu: dict[tuple[str, int], list[float]] = {}
    try:
        for _ in range(args.rounds):
            for rows, step in steps.items():
                for mode in MODES:
                    assert native.set_activations(mode)
                    step()
                    start = time.process_time()
                    step()
                    cpu.setdefault((mode, rows), []).append(1e3 * (time.process_time() - start))
    finally:
        native.set_activations("int16")
    report: dict[str, Any] = {
        "load_average": os.getloadavg()[0],
        "int16_body": native.int16_body(),
        "threads": native.status().get("threads"),
    }
    for mode in MODES:
        best = {rows: min(cpu[(mode, rows)]) for rows in ROWS}
        report[mode] = {
            f"{rows} rows CPU ms": {
                "best": round(best[rows], 2),
                "median": round(statistics.median(cpu[(mode, rows)]), 2),
            }
            for rows in ROWS
        }
        report[mode]["ms per extra row (best, 1 to 8)"] = round((best[8] - best[1]) / 7, 3)
    report["int8 / int16 (best)"] = {
        rows: round(min(cpu[("int8", rows)]) / min(cpu[("int16", rows)]), 3) for rows in ROWS
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
