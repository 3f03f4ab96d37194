"""Prompt lookup (n-gram drafts, no draft model) side by side in one run, on the default
model: an edit-shaped request (a ~1.5k-token file in the prompt, the answer rewriting it),
the same edit as two concurrent streams in one batch, the edit beside three ordinary chats
in one batch (a mixed batch: the edit's drafts verify while the chats take plain steps;
the edit stream's own tok/s reported too), and an ordinary chat, greedy and
sampled at temperature 0.8 (where lookup must not cost; greedy, a small model repeats
itself), each with ``--prompt-lookup off`` and ``auto`` in alternating rounds.

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 \\
        python benchmarks/bench_prompt_lookup.py [--tokens 200] [--rounds 2] [--json out.json]

Reports decode tok/s (tokens after each stream's first, over the time from the first token
to the last), the ratio auto / off (median, and each round's), process CPU ms per token
(steadier than wall time on a loaded machine), tokens proposed and accepted, whether each
output equals the output without lookup, and the load average (the machine is shared).
A prefix cache shared by the runs holds the prompts after the first round, so prefill
stays out of it.
``measure(...)`` is the entry point other benchmarks call.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from vllm_mlx.engine.drafting import Drafting
from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.generation import GenerationRequest
from vllm_mlx.engine.prefix_cache import PrefixCache
from vllm_mlx.engine.sampling import SamplingParams
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.models.loader import load_model


def source_file(lines: int) -> str:
    """A Python module of ``lines`` small functions (~50 tokens a function)."""
    out = ['"""Inventory helpers."""', "", "from dataclasses import dataclass", ""]
    for i in range(lines):
        out += [
            f"def item_{i}_total(count: int, price: float) -> float:",
            f'    """Total of item {i}: count times price plus {i} percent."""',
            f"    return count * price * {1 + i / 100:.2f}",
            "",
        ]
    return "\n".join(out)


def prompts(tokenizer: Any, lines: int) -> dict[str, list[int]]:
    code = source_file(lines)
    edit = (
        f"```python\n{code}\n```\n\n"
        "Rename `count` to `quantity` everywhere in the file above and print the full "
        "updated file."
    )
    texts = {
        "edit": edit,
        "chat": "Tell me about the history of the bicycle in a few paragraphs.",
        "chat2": "Describe how a steam engine works, step by step.",
        "chat3": "Write a short story about a lighthouse keeper and a storm.",
    }
    return {
        name: tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True
        )
        for name, text in texts.items()
    }


def run(
    model: Any, tokenizer: Any, cache: PrefixCache, stream_prompts: list[list[int]], mode: str,
    tokens: int, sampling: dict | None = None,
) -> dict:  # fmt: skip
    """One stream per prompt, all at once; ``first_tok_s``: the first stream's own rate."""
    source = ModelBatchSource(model, prefix_cache=cache, drafting=Drafting(prompt_lookup=mode))  # type: ignore[arg-type]
    engine = Engine(source, tokenizer)
    ban_eos = {t: -1e9 for t in tokenizer.eos_token_ids}
    streams = len(stream_prompts)
    results: list[dict] = [{} for _ in range(streams)]

    def one(slot: int) -> None:
        params = SamplingParams(
            max_tokens=tokens, logit_bias=ban_eos, **(sampling or {"temperature": 0})
        )
        stamps, out = [], []
        for chunk in engine.generate_sync(GenerationRequest(stream_prompts[slot], params)):
            stamps.append((time.perf_counter(), len(chunk.token_ids)))
            out += chunk.token_ids
        after_first = sum(n for _, n in stamps[1:])
        results[slot] = {"tokens": out, "n": after_first, "t": stamps[-1][0] - stamps[0][0]}

    cpu = time.process_time()
    try:
        threads = [threading.Thread(target=one, args=(s,)) for s in range(streams)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        engine.close()
    cpu = time.process_time() - cpu
    drafted, accepted = source.spec_counts
    return {
        "tok_s": sum(r["n"] for r in results) / max(r["t"] for r in results),
        "first_tok_s": results[0]["n"] / results[0]["t"],
        "cpu_ms": cpu * 1000 / sum(len(r["tokens"]) for r in results),
        "outputs": [r["tokens"] for r in results],
        "drafted": drafted,
        "accepted": accepted,
    }


def measure(
    tokens: int = 200, rounds: int = 2, lines: int = 30, only: list[str] | None = None
) -> list[dict]:
    """Each workload's rows (``only``: those named): decode tok/s off and auto (medians),
    their ratio, the first stream's (the edit's) tok/s and ratio, lookup's counts, output
    equality, and the load average while it ran."""
    loaded = load_model(None, progress=False)
    tokenizer = loaded.tokenizer
    cache = PrefixCache(max_bytes=2 << 30)
    texts = prompts(tokenizer, lines)
    sampled = {"temperature": 0.8, "seed": 42}  # seeded: the same tokens with lookup
    workloads = {
        "edit": (["edit"], None),
        "edit x2 streams": (["edit", "edit"], None),
        "edit + 3 chats": (["edit", "chat", "chat2", "chat3"], None),
        "chat": (["chat"], None),
        "chat sampled": (["chat"], sampled),
    }
    rows = []
    for name, (names, sampling) in workloads.items():
        if only and name not in only:
            continue
        stream_prompts = [texts[n] for n in names]
        runs: dict[str, list[dict]] = {"off": [], "auto": []}
        loads = []
        for prompt in dict.fromkeys(map(tuple, stream_prompts)):  # the prompts into the cache
            run(loaded.model, tokenizer, cache, [list(prompt)], "off", 2)
        for _ in range(rounds):
            for mode in runs:
                runs[mode].append(
                    run(loaded.model, tokenizer, cache, stream_prompts, mode, tokens, sampling)
                )
                loads.append(os.getloadavg()[0])
                print(f"{name} {mode}: {runs[mode][-1]['tok_s']:.1f} tok/s (load {loads[-1]:.1f})")
        off = statistics.median(r["tok_s"] for r in runs["off"])
        auto = statistics.median(r["tok_s"] for r in runs["auto"])
        first = {mode: statistics.median(r["first_tok_s"] for r in rs) for mode, rs in runs.items()}
        cpu = {mode: statistics.median(r["cpu_ms"] for r in rs) for mode, rs in runs.items()}
        rows.append(
            {
                "workload": name,
                "prompt_tokens": len(stream_prompts[0]),
                "streams": len(stream_prompts),
                "off_tok_s": round(off, 2),
                "auto_tok_s": round(auto, 2),
                "ratio": round(auto / off, 3),
                "round_ratios": [
                    round(a["tok_s"] / o["tok_s"], 2)
                    for o, a in zip(runs["off"], runs["auto"], strict=True)
                ],
                "first_off_tok_s": round(first["off"], 2),
                "first_auto_tok_s": round(first["auto"], 2),
                "first_ratio": round(first["auto"] / first["off"], 3),
                "cpu_ms_off": round(cpu["off"], 1),
                "cpu_ms_auto": round(cpu["auto"], 1),
                "cpu_ratio": round(cpu["auto"] / cpu["off"], 3),
                "proposed": runs["auto"][0]["drafted"],
                "accepted": runs["auto"][0]["accepted"],
                "same_output": all(
                    r["outputs"] == runs["off"][0]["outputs"] for r in runs["off"] + runs["auto"]
                ),
                "load_avg": round(statistics.mean(loads), 2),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--lines", type=int, default=30, help="functions in the edited file")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--workloads", help="comma-separated names (default: all)")
    args = parser.parse_args()
    only = args.workloads.split(",") if args.workloads else None
    rows = measure(args.tokens, args.rounds, args.lines, only)
    print("| workload | prompt | off tok/s | auto tok/s | auto/off (rounds) |", end="")
    print(" first stream off, auto (ratio) |", end="")
    print(" CPU ms/token off, auto (ratio) | accepted/proposed | same | load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['workload']} | {r['prompt_tokens']} | {r['off_tok_s']} | {r['auto_tok_s']} | "
            f"{r['ratio']} ({', '.join(map(str, r['round_ratios']))}) | "
            f"{r['first_off_tok_s']}, {r['first_auto_tok_s']} ({r['first_ratio']}) | "
            f"{r['cpu_ms_off']}, {r['cpu_ms_auto']} ({r['cpu_ratio']}) | "
            f"{r['accepted']}/{r['proposed']} | {r['same_output']} | {r['load_avg']} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
