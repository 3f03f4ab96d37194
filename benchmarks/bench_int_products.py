"""What a row of x costs the integer products, per int16 body, side by side.

    VLLM_MLX_NATIVE_THREADS=1 python benchmarks/bench_int_products.py [--bodies packed vnni]

Every quantized matmul of one decode step of the default model (its 210 layer
projections and the 8-bit output projection, ``native.quantized_matmul``) for 1, 2, 4
and 8 rows of x, on each int16 body (``native.set_int16_body``: VNNI and AVX2 where the
CPU has them; "packed": VNNI on packed weight copies, ``native.set_packed``), the bodies
alternating in each round so load drift hits them alike.
Reports CPU ms per step (best and median; one thread makes CPU time the work itself),
the cost of each row past the first (from 1 to 8 rows), and each body's ratio to the
first one.
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


def select(body: str) -> bool:
    """Run the products on ``body`` ("packed": the VNNI body on packed weights)."""
    native.set_packed(body == "packed")
    return native.set_int16_body("vnni" if body == "packed" else body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--bodies", nargs="+", default=["packed", "vnni", "avx2"])
    args = parser.parse_args()
    default = native.int16_body() or "avx2"
    bodies = [body for body in args.bodies if select(body)]
    model = load_model(None, cpu_weights="quantized", progress=False).model
    steps = {rows: products(model, rows) for rows in ROWS}
    cpu: dict[tuple[str, int], list[float]] = {}
    try:
        for _ in range(args.rounds):
            for rows, step in steps.items():
                for body in bodies:
                    assert select(body)
                    step()
                    start = time.process_time()
                    step()
                    cpu.setdefault((body, rows), []).append(1e3 * (time.process_time() - start))
    finally:
        native.set_packed(False)
        native.set_int16_body(default)
    report: dict[str, Any] = {
        "load_average": os.getloadavg()[0],
        "threads": native.status().get("threads"),
    }
    for mode in bodies:
        best = {rows: min(cpu[(mode, rows)]) for rows in ROWS}
        report[mode] = {
            f"{rows} rows CPU ms": {
                "best": round(best[rows], 2),
                "median": round(statistics.median(cpu[(mode, rows)]), 2),
            }
            for rows in ROWS
        }
        report[mode]["ms per extra row (best, 1 to 8)"] = round((best[8] - best[1]) / 7, 3)
    for body in bodies[1:]:
        report[f"{body} / {bodies[0]} (best)"] = {
            rows: round(min(cpu[(body, rows)]) / min(cpu[(bodies[0], rows)]), 3) for rows in ROWS
        }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
