"""Float16 vs float32 scales and biases in the native kernels, interleaved in one process.

    python benchmarks/bench_half_scales.py [--rounds 20] [--decode-tokens 16]

The default model is loaded twice, once as ``patch.enable`` leaves it (float16 scales and
biases, the GGUF's own values) and once with ``VLLM_MLX_NATIVE_F16=0`` (float32), and the
two are timed in alternating rounds, so a shared machine's load drift hits both alike:

1. every quantized matmul of one decode step (M=1) and of a 4-row batch: ms, GB/s of
   weights + scales + biases, and those bytes (what a token's matmuls read);
2. greedy decode after a 128-token prompt (``model(token, cache)`` + argmax): ms per token
   (wall and CPU time); both models must pick the same tokens.

Reports the best round and the median of each, and float16 / float32 ratios.
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
from mlx_lm.models.cache import make_prompt_cache

from vllm_mlx.models import load_model
from vllm_mlx.native.patch import HALF_ENV


def load(half: bool) -> Any:
    os.environ[HALF_ENV] = "1" if half else "0"
    model = load_model(None, cpu_weights="quantized", progress=False).model
    want = mx.float16 if half else mx.float32
    assert model.model.embed_tokens.scales.dtype == want, "the kernels are not routed"
    return model


def matmul_step(model: Any, rows: int) -> tuple[Callable[[], None], int]:
    """A callable running all quantized matmuls for ``rows`` rows, and the bytes they read."""
    layers = [m for _, m in model.named_modules() if isinstance(m, nn.QuantizedLinear)]
    embedding = model.model.embed_tokens
    widths = {m.weight.shape[1] * 32 // m.bits for m in [*layers, embedding]}
    xs = {k: mx.random.normal((rows, k), key=mx.random.key(k)) for k in widths}
    mx.eval(list(xs.values()))
    width = embedding.weight.shape[1] * 32 // embedding.bits
    nbytes = sum(m.weight.nbytes + m.scales.nbytes + m.biases.nbytes for m in [*layers, embedding])

    def step() -> None:
        outs = [m(xs[m.weight.shape[1] * 32 // m.bits]) for m in layers]
        mx.eval(*outs, embedding.as_linear(xs[width]))

    return step, nbytes


def decode(model: Any, tokens: int) -> tuple[list[int], float, float]:
    """Greedy tokens after a fixed 128-token prompt; wall and CPU ms per decoded token."""
    cache = make_prompt_cache(model)
    prompt = mx.array([[(37 * i) % 30000 + 100 for i in range(128)]])
    token = mx.argmax(model(prompt, cache=cache)[:, -1, :], axis=-1)
    mx.eval(token)
    out = []
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(tokens):
        token = mx.argmax(model(token[None], cache=cache)[:, -1, :], axis=-1)
        out.append(token.item())
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return out, 1e3 * wall / tokens, 1e3 * cpu / tokens


def summary(samples: list[float]) -> dict[str, float]:
    return {"best": round(min(samples), 3), "median": round(statistics.median(samples), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--decode-tokens", type=int, default=16)
    args = parser.parse_args()
    models = {"f16": load(True), "f32": load(False)}
    steps = {(name, rows): matmul_step(m, rows) for name, m in models.items() for rows in (1, 4)}
    times: dict[str, list[float]] = {}
    tokens: dict[str, list[int]] = {}
    for _ in range(args.rounds):
        for name, model in models.items():
            for rows in (1, 4):
                step, _ = steps[(name, rows)]
                step()
                start = time.perf_counter()
                step()
                times.setdefault(f"{name} matmuls M={rows} ms", []).append(
                    1e3 * (time.perf_counter() - start)
                )
            tokens[name], wall, cpu = decode(model, args.decode_tokens)
            times.setdefault(f"{name} decode ms/token", []).append(wall)
            times.setdefault(f"{name} decode CPU ms/token", []).append(cpu)
    assert tokens["f16"] == tokens["f32"], "float16 scales changed the greedy tokens"
    report: dict[str, Any] = {"load_average": os.getloadavg()[0]}
    report["mb_per_token"] = {name: round(steps[(name, 1)][1] / 1e6, 1) for name in models}
    report["times"] = {key: summary(samples) for key, samples in times.items()}
    for rows in (1, 4):
        for name in models:
            best = min(times[f"{name} matmuls M={rows} ms"])
            report[f"{name} matmul GB/s M={rows}"] = round(steps[(name, rows)][1] / best / 1e6, 2)
    report["f16 / f32"] = {
        key.removeprefix("f16 "): {
            stat: round(value / report["times"]["f32" + key[3:]][stat], 3)
            for stat, value in figures.items()
        }
        for key, figures in report["times"].items()
        if key.startswith("f16 ")
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
