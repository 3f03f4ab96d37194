"""KV cache precision side by side in one run: memory per 1k context tokens, prefill and
decode speed, and greedy agreement with the full cache.

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 \\
        python benchmarks/bench_kv_cache.py [--context 1024] [--decode 32] [--rounds 2]

The default model goes through the real engine (``ModelBatchSource`` + prefix cache) once
per mode and round, modes interleaved so the machine's load hits them alike. Float32
weights give a float32 cache ("fp32"); each quantized mode (``--kv-bits 8`` / ``4``, group
64) is compared with it: prefill time and decode tok/s ratios, and how many leading greedy
tokens agree. Memory is the stored prefix-cache entry (exactly the context's keys and values)
per 1,024 tokens. The same weights cast to bfloat16 give a bfloat16 cache ("bf16"), measured
for memory only on a ``--bf16-context``-token prompt: MLX's CPU backend has no fast bfloat16
matmul (a 1k-token prefill takes minutes), and bytes per token do not depend on the length.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import mlx.core as mx

from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.generation import GenerationRequest
from vllm_mlx.engine.prefix_cache import PrefixCache
from vllm_mlx.engine.sampling import SamplingParams
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.models.loader import load_model

TEXT = (
    "An agent session resends its whole history every turn: the system prompt, the tools, "
    "each user message, each tool result and each answer. The server keeps the keys and "
    "values of every token it has seen so that the next turn only computes what is new. "
)


def run_mode(model, tokenizer, prompt: list[int], bits: int | None, decode: int) -> dict:
    cache = PrefixCache(4 << 30)
    source = ModelBatchSource(model, prefix_cache=cache, kv_bits=bits, kv_group_size=64)
    engine = Engine(source, tokenizer)
    ban_eos = {t: -1e9 for t in tokenizer.eos_token_ids}
    params = SamplingParams(max_tokens=decode, temperature=0, logit_bias=ban_eos)
    start, stamps, cpu, tokens = time.perf_counter(), [], [], []
    try:
        for chunk in engine.generate_sync(GenerationRequest(prompt, params)):
            stamps.append(time.perf_counter())
            cpu.append(time.process_time())
            tokens += chunk.token_ids
    finally:
        engine.close()
    return {
        "prefill_s": stamps[0] - start,
        "decode_tok_s": (len(stamps) - 1) / (stamps[-1] - stamps[0]),
        "decode_cpu_ms": (cpu[-1] - cpu[0]) / (len(cpu) - 1) * 1000,
        "cache_mb_per_1k": cache.nbytes / (len(prompt) + decode) * 1024 / 2**20,  # prompt + output
        "tokens": tokens,
    }


def agreement(a: list[int], b: list[int]) -> int:
    """Leading tokens two greedy decodes share."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), len(a))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--decode", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--bf16-context", type=int, default=64)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    loaded = load_model(None, cpu_weights="float32", progress=False)
    tokenizer = loaded.tokenizer
    ids = tokenizer.encode(TEXT * (args.context // 40 + 2), add_special_tokens=False)
    prompt = ids[: args.context]
    modes = [("fp32", bits) for bits in (None, 8, 4)]
    runs: dict[tuple, list[dict]] = {m: [] for m in modes}
    for round_ in range(args.rounds):
        for weights, bits in modes:
            result = run_mode(loaded.model, tokenizer, prompt, bits, args.decode)
            runs[(weights, bits)].append(result)
            print(
                f"round {round_} {weights} kv_bits={bits}: prefill {result['prefill_s']:.2f} s, "
                f"decode {result['decode_tok_s']:.2f} tok/s"
            )
    bf16 = load_model(None, cpu_weights="float32", progress=False).model
    bf16.set_dtype(mx.bfloat16)
    mx.eval(bf16.parameters())  # cast here: the engine's thread cannot run this thread's graph
    bf16_memory = {
        bits: run_mode(bf16, tokenizer, prompt[: args.bf16_context], bits, 2)["cache_mb_per_1k"]
        for bits in (None, 8, 4)
    }
    rows = [
        {
            "weights": "bf16",
            "kv": f"{bits}-bit" if bits else "bf16",
            "mb_per_1k_tokens": round(mb, 2),
        }
        for bits, mb in bf16_memory.items()
    ]
    for weights, bits in modes:
        full = runs[(weights, None)]
        mine = runs[(weights, bits)]
        decode = statistics.median(r["decode_tok_s"] for r in mine)
        prefill = statistics.median(r["prefill_s"] for r in mine)
        rows.append(
            {
                "weights": weights,
                "kv": f"{bits}-bit" if bits else weights,
                "mb_per_1k_tokens": round(mine[0]["cache_mb_per_1k"], 2),
                "prefill_s": round(prefill, 2),
                "decode_tok_s": round(decode, 2),
                "decode_ratio": round(
                    decode / statistics.median(r["decode_tok_s"] for r in full), 3
                ),
                "prefill_ratio": round(
                    prefill / statistics.median(r["prefill_s"] for r in full), 3
                ),
                "decode_cpu_ms": round(statistics.median(r["decode_cpu_ms"] for r in mine), 1),
                "greedy_agree": f"{agreement(full[0]['tokens'], mine[0]['tokens'])}/{args.decode}",
            }
        )
    print(f"\ncontext {len(prompt)} tokens, {args.decode} decoded, median of {args.rounds}")
    print(
        "| weights | KV | MB per 1k tokens | prefill s | decode tok/s | decode vs full | "
        "prefill vs full | decode CPU ms/token | greedy tokens = full |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        cells = [r.get(k, "—") for k in ("weights", "kv", "mb_per_1k_tokens", "prefill_s")]
        cells += [
            r.get(k, "—")
            for k in ("decode_tok_s", "decode_ratio", "prefill_ratio", "decode_cpu_ms")
        ]
        print("| " + " | ".join(str(c) for c in [*cells, r.get("greedy_agree", "—")]) + " |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
