"""Decode on an agent's shape, side by side in one process: greedy against the sampling
clients send (temperature 0.8, seeded; with top-p 0.95; with penalties), each sampled row
on the native draw and on MLX's ops (the sampler before the native draw), in alternating
rounds on the embedded model. Also the sampler alone per token over the full vocabulary.

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 \\
        python benchmarks/bench_agent_shapes.py [--tokens 64] [--rounds 3]

llama.cpp is not part of this run (llama-cpp-python is not installed here): the ratios are
ours sampled / ours greedy, the target being 1.0 (llama.cpp's sampled equals its greedy).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import mlx.core as mx

from vllm_mlx.engine import sampling
from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.generation import GenerationRequest
from vllm_mlx.engine.sampling import RequestSampler, SamplingParams, make_penalty_processors
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.models.loader import load_model

PROMPT = "Write a short Python function that returns the sum of a list, then explain it."
DECODES: dict[str, dict] = {
    "greedy": {"temperature": 0},
    "t=0.8 seeded": {"temperature": 0.8, "seed": 1},
    "t=0.8 top_p=0.95 seeded": {"temperature": 0.8, "top_p": 0.95, "seed": 1},
    "t=0.8 top_p=0.95 top_k=40 min_p=0.05 + penalties": {
        "temperature": 0.8,
        "top_p": 0.95,
        "top_k": 40,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.5,
        "seed": 1,
    },
}


def decode(engine: Engine, prompt, params: SamplingParams) -> float:
    """Decode tok/s after the first token."""
    stamps = [time.perf_counter() for _ in engine.generate_sync(GenerationRequest(prompt, params))]
    return (len(stamps) - 1) / (stamps[-1] - stamps[0])


def sampler_ms(row: mx.array, params: SamplingParams, rounds: int = 40) -> float:
    sampler, processors = RequestSampler(params), make_penalty_processors(params)
    context = mx.arange(20)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        x = row
        for processor in processors:
            x = processor(context, x)
        mx.eval(sampler(x))
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    loaded = load_model(None, progress=False)
    native_draw = sampling._draw  # set by the model load when the kernel is built
    tokenizer = loaded.tokenizer
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}], add_generation_prompt=True
    )
    ban_eos = {t: -1e9 for t in tokenizer.eos_token_ids}
    paths = {"native draw": native_draw, "MLX ops": None} if native_draw else {"MLX ops": None}
    row = mx.random.normal((1, loaded.model.args.vocab_size), key=mx.random.key(0)) * 3
    row = row - mx.logsumexp(row, axis=-1, keepdims=True)
    mx.eval(row)
    results: dict[tuple[str, str], list[float]] = {}
    per_token: dict[tuple[str, str], list[float]] = {}
    engine = Engine(ModelBatchSource(loaded.model), tokenizer)
    try:
        for _ in range(args.rounds):
            for name, options in DECODES.items():
                for path, draw in paths.items():
                    if name == "greedy" and path != next(iter(paths)):
                        continue
                    sampling.use_draw(draw)
                    params = SamplingParams(max_tokens=args.tokens, logit_bias=ban_eos, **options)
                    results.setdefault((name, path), []).append(decode(engine, prompt, params))
                    per_token.setdefault((name, path), []).append(
                        sampler_ms(row, SamplingParams(**options))
                    )
    finally:
        engine.close()
        sampling.use_draw(native_draw)
    greedy = statistics.median(results[("greedy", next(iter(paths)))])
    rows = [
        {
            "decode": name,
            "sampler": "—" if name == "greedy" else path,
            "tok_s": round(statistics.median(v), 2),
            "vs_greedy": round(statistics.median(v) / greedy, 3),
            "sampler_ms_per_token": round(statistics.median(per_token[(name, path)]), 3),
        }
        for (name, path), v in results.items()
    ]
    print("| decode | sampler | tok/s | vs greedy | sampler + processors ms/token (49k row) |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['decode']} | {r['sampler']} | {r['tok_s']} | {r['vs_greedy']} | "
            f"{r['sampler_ms_per_token']} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
