"""Invariant vs BLAS prefill on the native path, interleaved in one process.

    python benchmarks/bench_invariant_prefill.py [--context 2000] [--rounds 4] [--decode-tokens 32]

The default model (native kernels) prefills one ``--context``-token prompt in the
server's 256-token chunks under ``VLLM_MLX_NATIVE_PREFILL=invariant`` (the default: int16
products and the native attention for every block) and ``blas`` (blocks past 64 rows
dequantize for OpenBLAS's sgemm, attention as BLAS matmuls), in alternating rounds so a
shared machine's load drift hits both alike, then greedy-decodes ``--decode-tokens``
(decode runs the same one-node step in both modes). Reports prompt and decode tok/s (best
and median round) and invariant / blas ratios. Run with OpenBLAS preloaded (scripts/test.sh
does it), or ``blas`` falls back to the kernels too.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache

from vllm_mlx.models import load_model
from vllm_mlx.native.layers import PREFILL_ENV

CHUNK = 256  # the server's default --prefill-step-size


def one_round(model: Any, prompt: mx.array, mode: str, decode_tokens: int) -> tuple[float, float]:
    os.environ[PREFILL_ENV] = mode
    cache = make_prompt_cache(model)
    start = time.perf_counter()
    for at in range(0, prompt.size - 1, CHUNK):
        model(prompt[None, at : min(at + CHUNK, prompt.size - 1)], cache=cache)
        mx.eval([c.state for c in cache])
    prefill_s = time.perf_counter() - start
    token = prompt[-1:]
    start = time.perf_counter()
    for _ in range(decode_tokens):
        token = mx.argmax(model(token[None], cache=cache)[0, -1:], axis=-1)
        mx.eval(token)
    decode_s = time.perf_counter() - start
    return (prompt.size - 1) / prefill_s, decode_tokens / decode_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--context", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--decode-tokens", type=int, default=32)
    args = parser.parse_args()
    model = load_model(None, progress=False).model
    prompt = mx.array([1, *((i * 7919) % 40000 + 100 for i in range(args.context - 1))])
    runs: dict[str, list[tuple[float, float]]] = {"invariant": [], "blas": []}
    one_round(model, prompt[:300], "invariant", 2)  # warm-up
    for _ in range(args.rounds):
        for mode in runs:
            runs[mode].append(one_round(model, prompt, mode, args.decode_tokens))
    report: dict[str, Any] = {"context": args.context, "load": os.getloadavg()[0]}
    for i, what in enumerate(("prefill_tok_s", "decode_tok_s")):
        for mode, values in runs.items():
            series = [v[i] for v in values]
            report[f"{what}_{mode}"] = {"best": max(series), "median": statistics.median(series)}
        report[f"{what}_invariant_over_blas"] = {
            k: report[f"{what}_invariant"][k] / report[f"{what}_blas"][k]
            for k in ("best", "median")
        }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
