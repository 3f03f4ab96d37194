"""Float16 vs float32 KV caches on the native path, interleaved in one process.

    python benchmarks/bench_kv_half.py [--context 2000] [--rounds 8] [--decode-tokens 16]

The default model (native kernels) prefills one ``--context``-token prompt into a float32
and a float16 cache (``VLLM_MLX_NATIVE_KV``), then greedy-decodes ``--decode-tokens``
from each in alternating rounds (each round trims its cache back to the prompt), so a
shared machine's load drift hits both alike. Reports per token wall and CPU ms (best and
median round), the caches' bytes, float16 / float32 ratios, and whether both picked the
same tokens. The one-process-per-path rows (RSS among them) are bench_cpu_kernels.py's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache

from vllm_mlx.models import load_model
from vllm_mlx.native.layers import KV_ENV


def prefill(model: Any, prompt: mx.array, kv: str) -> tuple[list[Any], mx.array]:
    os.environ[KV_ENV] = kv
    cache = make_prompt_cache(model)
    for start in range(0, prompt.size - 1, 512):
        model(prompt[None, start : min(start + 512, prompt.size - 1)], cache=cache)
        mx.eval([c.state for c in cache])
    want = mx.float16 if kv == "f16" else mx.float32
    assert cache[0].keys.dtype == want, "the native path did not write this cache"
    return cache, prompt[-1:]


def decode(model: Any, cache: list[Any], last: mx.array, kv: str, tokens: int) -> tuple:
    """(tokens, wall ms per token, CPU ms per token), the cache trimmed back afterwards."""
    os.environ[KV_ENV] = kv
    token, out = last[None], []
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(tokens):
        logits = model(token, cache=cache)
        token = mx.argmax(logits[:, -1, :], axis=-1)[None]
        out.append(token.item())
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    trim_prompt_cache(cache, tokens)
    return out, 1e3 * wall / tokens, 1e3 * cpu / tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--context", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--decode-tokens", type=int, default=16)
    args = parser.parse_args()
    loaded = load_model(None, cpu_weights="quantized", progress=False)
    assert loaded.kernels.startswith("native"), "build the native kernels first"
    model = loaded.model
    prompt = mx.array(np.random.default_rng(0).integers(100, 40000, args.context).tolist())
    caches = {kv: prefill(model, prompt, kv) for kv in ("f32", "f16")}
    times: dict[str, dict[str, list[float]]] = {kv: {"wall": [], "cpu": []} for kv in caches}
    tokens: dict[str, list[int]] = {}
    for _ in range(args.rounds):
        for kv, (cache, last) in caches.items():
            tokens[kv], wall, cpu = decode(model, cache, last, kv, args.decode_tokens)
            times[kv]["wall"].append(wall)
            times[kv]["cpu"].append(cpu)
    report: dict[str, Any] = {"context": args.context, "load_average": os.getloadavg()[0]}
    for kv, cache in caches.items():
        report[kv] = {
            "cache_mb": round(sum(c.nbytes for c in cache[0]) / 1e6, 1),
            **{
                f"{what}_ms_per_token": {
                    "best": round(min(values), 2),
                    "median": round(statistics.median(values), 2),
                }
                for what, values in times[kv].items()
            },
        }
    report["f16_over_f32"] = {
        f"{what}_{stat}": round(
            report["f16"][f"{what}_ms_per_token"][stat]
            / report["f32"][f"{what}_ms_per_token"][stat],
            3,
        )
        for what in ("wall", "cpu")
        for stat in ("best", "median")
    }
    report["same_tokens"] = tokens["f16"] == tokens["f32"]
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
