"""What a prefix-cache hit costs, side by side in one run: a cached N-token prefix plus a
short new suffix, with the entry shared (views, the default) and deep-copied (the previous
behaviour), against prefilling only the suffix with no cache at all (the target: hit <= 2x).

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 \\
        python benchmarks/bench_cache_hit.py [--prefix-tokens 2048] [--suffix-tokens 8]

In-process on the default model through the real engine; TTFT is the time to the first
generated token, reported as wall time and as this process's CPU time (all threads), which a
machine shared with other work distorts far less. Rounds interleave the three cases.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import time
from pathlib import Path

from vllm_mlx.engine import prefix_cache as prefix_cache_module
from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.generation import GenerationRequest
from vllm_mlx.engine.prefix_cache import PrefixCache
from vllm_mlx.engine.sampling import SamplingParams
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.models.loader import load_model

SHARED = prefix_cache_module.shared_copy


def first_token(engine: Engine, prompt: list[int]) -> tuple[float, float, int]:
    """(wall seconds, process CPU seconds, cached tokens) to the first token."""
    wall, cpu = time.perf_counter(), time.process_time()
    request = GenerationRequest(prompt, SamplingParams(max_tokens=1, temperature=0))
    chunks = list(engine.generate_sync(request))
    return time.perf_counter() - wall, time.process_time() - cpu, chunks[-1].cached_tokens


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prefix-tokens", type=int, default=2048)
    parser.add_argument("--suffix-tokens", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rng = random.Random(0)
    loaded = load_model(None, cpu_weights="float32", progress=False)
    cache = PrefixCache(4 << 30)
    engine = Engine(ModelBatchSource(loaded.model, prefix_cache=cache), loaded.tokenizer)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(100, 49_000) for _ in range(n)]

    prefix = tokens(args.prefix_tokens)
    fill, fill_cpu, _ = first_token(engine, prefix)
    print(f"prefill of {len(prefix)} tokens: {fill:.1f} s wall, {fill_cpu:.1f} s CPU")
    cases = ("shared", "deep_copy", "suffix_only")
    times: dict[str, list[float]] = {c: [] for c in cases}
    cpu: dict[str, list[float]] = {c: [] for c in cases}
    try:
        for _ in range(args.rounds):
            for case in times:
                prefix_cache_module.shared_copy = copy.deepcopy if case == "deep_copy" else SHARED
                if case == "suffix_only":
                    seconds, used, cached = first_token(engine, tokens(args.suffix_tokens))
                else:
                    prompt = prefix + tokens(args.suffix_tokens)
                    seconds, used, cached = first_token(engine, prompt)
                    assert cached >= len(prefix), cached
                times[case].append(seconds)
                cpu[case].append(used)
                print(f"{case}: {seconds:.3f} s wall, {used:.3f} s CPU (cached {cached})")
    finally:
        prefix_cache_module.shared_copy = SHARED
        engine.close()
    result: dict = {"prefix_tokens": args.prefix_tokens, "prefill_s": round(fill, 1)}
    for name, series in (("wall", times), ("cpu", cpu)):
        med = {case: statistics.median(v) for case, v in series.items()}
        result[name] = {case: round(v, 3) for case, v in med.items()}
        result[name]["shared_vs_suffix"] = round(med["shared"] / med["suffix_only"], 2)
        result[name]["deep_copy_vs_suffix"] = round(med["deep_copy"] / med["suffix_only"], 2)
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
