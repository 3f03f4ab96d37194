"""Speculative decoding side by side in one run: one greedy stream on the default model
without a draft, with the target as its own draft (every proposal accepted: the upper bound,
which measures the overhead), and with a smaller draft — the target's first
``--draft-layers`` layers and its head (a layer-skip draft: no smaller model of the same
vocabulary is available offline).

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 \\
        python benchmarks/bench_speculative.py [--tokens 48] [--num-draft 4] [--rounds 2]

Reports decode tok/s (after the first token), process CPU ms per token, the acceptance
rate, and whether each output equals the no-draft output.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from vllm_mlx.engine.drafting import Drafting
from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.generation import GenerationRequest
from vllm_mlx.engine.sampling import SamplingParams
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.models.loader import load_model

PROMPT = "Write a short Python function that returns the sum of a list, then explain it."


def greedy_stream(source: ModelBatchSource, tokenizer, prompt: list[int], tokens: int) -> dict:
    """One greedy stream of ``tokens`` (EOS banned) through an engine over ``source``:
    decode tok/s and CPU ms per token after the first token, the output, the draft counts."""
    engine = Engine(source, tokenizer)
    ban_eos = {t: -1e9 for t in tokenizer.eos_token_ids}
    params = SamplingParams(max_tokens=tokens, temperature=0, logit_bias=ban_eos)
    stamps, cpu, out = [], [], []
    try:
        for chunk in engine.generate_sync(GenerationRequest(prompt, params)):
            stamps.append(time.perf_counter())
            cpu.append(time.process_time())
            out += chunk.token_ids
    finally:
        engine.close()
    decoded = len(out) - 1  # a chunk may carry several accepted tokens
    drafted, accepted = source.spec_counts
    return {
        "tok_s": decoded / (stamps[-1] - stamps[0]),
        "cpu_ms": 1000 * (cpu[-1] - cpu[0]) / decoded,
        "drafted": drafted,
        "accepted": accepted,
        "tokens": out,
    }


def run(model, draft, tokenizer, prompt, tokens: int, num_draft: int) -> dict:
    source = ModelBatchSource(
        model, drafting=Drafting(draft_model=draft, num_draft_tokens=num_draft)
    )
    result = greedy_stream(source, tokenizer, prompt, tokens)
    drafted, accepted = result.pop("drafted"), result.pop("accepted")
    return {**result, "acceptance": accepted / drafted if drafted else None}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--num-draft", type=int, default=4)
    parser.add_argument("--draft-layers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    target = load_model(None, cpu_weights="float32", progress=False)
    small = load_model(None, cpu_weights="float32", progress=False).model
    small.model.layers = small.model.layers[: args.draft_layers]
    tokenizer = target.tokenizer
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}], add_generation_prompt=True
    )
    drafts = {"none": None, "self": target.model, f"first {args.draft_layers} layers": small}
    runs: dict[str, list[dict]] = {name: [] for name in drafts}
    for _ in range(args.rounds):
        for name, draft in drafts.items():
            result = run(target.model, draft, tokenizer, prompt, args.tokens, args.num_draft)
            runs[name].append(result)
            print(f"{name}: {result['tok_s']:.2f} tok/s, {result['cpu_ms']:.0f} ms CPU/token")
    base = statistics.median(r["tok_s"] for r in runs["none"])
    base_cpu = statistics.median(r["cpu_ms"] for r in runs["none"])
    rows = []
    for name, results in runs.items():
        tok_s = statistics.median(r["tok_s"] for r in results)
        cpu_ms = statistics.median(r["cpu_ms"] for r in results)
        rows.append(
            {
                "draft": name,
                "tok_s": round(tok_s, 2),
                "vs_no_draft": round(tok_s / base, 3),
                "cpu_ms_per_token": round(cpu_ms, 1),
                "cpu_vs_no_draft": round(cpu_ms / base_cpu, 3),
                "acceptance": results[0]["acceptance"],
                "same_output": all(r["tokens"] == runs["none"][0]["tokens"] for r in results),
            }
        )
    print("| draft | tok/s | vs no draft | CPU ms/token | CPU vs no draft | accepted | same |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        acceptance = "—" if r["acceptance"] is None else f"{r['acceptance']:.2f}"
        print(
            f"| {r['draft']} | {r['tok_s']} | {r['vs_no_draft']} | {r['cpu_ms_per_token']} | "
            f"{r['cpu_vs_no_draft']} | {acceptance} | {r['same_output']} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
