"""Multi-token-prediction drafts side by side in one run: one greedy stream without the
head (`--mtp off`), with the checkpoint's head (`on` and `auto`), and with a head that
proposes the model's own next tokens (every draft accepted: the upper bound, which
measures what verification costs and gains), rounds alternating.

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 \\
        python benchmarks/bench_mtp.py [--model DIR | --arch qwen3_next] [--tokens 48] [--rounds 3]

``--model``: a checkpoint that carries its MTP head (DeepSeek-V3/R1, GLM-4.5, MiMo,
Qwen3-Next);
without it, a random-weight checkpoint from the tests, ``--arch`` (a 61-layer DeepSeek-V3
by default; ``qwen3_next``: its recurrent layers restored and re-run after a rejection).
Its own head is never right, so `on` measures the cost of rejected drafts; "right" heads
propose the model's own tokens, "right k=3 miss 3" every third one wrong (chains kept in
part). Reports decode tok/s
(after the first token), CPU ms per token, the acceptance, and whether each output equals
the output without the head.

``--streams N`` (N > 1): N greedy streams at once in the continuous batch, where the head
drafts for every row (``engine/mtp_batch.py``); tok/s and CPU ms per token are the
streams' together from the first insert (prefill included, the same for every variant).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from vllm_mlx.engine.drafting import Drafting
from vllm_mlx.engine.sampling import SamplingParams, make_sampler
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.models.loader import load_model
from vllm_mlx.models.mtp_heads import load_mtp_heads

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))  # the tests' checkpoints
from bench_speculative import PROMPT, greedy_stream  # noqa: E402
from tiny_mtp import OracleHeads, RowOracleHeads, write_mtp_folder  # noqa: E402


def run(loaded, heads, mode: str, k: int, prompt: list[int], tokens: int) -> dict:
    source = ModelBatchSource(
        loaded.model, drafting=Drafting(mtp_heads=heads, mtp=mode, mtp_tokens=k)
    )
    result = greedy_stream(source, loaded.tokenizer, prompt, tokens)
    drafted, accepted = result.pop("drafted"), result.pop("accepted")
    return {**result, "accepted": f"{accepted}/{drafted}"}


def batch_streams(source: ModelBatchSource, prompts: list[list[int]], tokens: int) -> dict:
    """Greedy streams of ``tokens`` each, inserted together, stepped until all end."""
    outs: dict[int, list[int]] = {}
    wall, cpu = time.perf_counter(), time.process_time()
    for prompt in prompts:
        sampler = make_sampler(SamplingParams(temperature=0))
        uid, _ = source.insert(prompt, sampler=sampler, processors=[], max_tokens=tokens)
        outs[uid] = []
    done: set[int] = set()
    while len(done) < len(outs):
        steps, ended = source.step()
        for step in steps:
            outs[step.uid].append(step.token)
            if step.at_limit:
                done.add(step.uid)
        done.update(ended)
    total = sum(len(o) for o in outs.values())
    drafted, accepted = source.spec_counts
    return {
        "tok_s": total / (time.perf_counter() - wall),
        "cpu_ms": 1000 * (time.process_time() - cpu) / total,
        "accepted": f"{accepted}/{drafted}",
        "tokens": list(outs.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model")
    parser.add_argument("--arch", default="deepseek_v3")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", type=int, default=1)
    args = parser.parse_args()
    if args.model:
        folder = Path(args.model)
    else:
        tmp = Path(tempfile.mkdtemp(prefix="bench-mtp-"))
        folder = write_mtp_folder(tmp / args.arch, args.arch)
    loaded = load_model(str(folder), cpu_weights="float32", progress=False)
    heads = load_mtp_heads(folder, loaded.model)
    assert heads is not None, f"{folder} carries no MTP head"
    prompt = loaded.tokenizer.encode(PROMPT)
    if args.streams > 1:
        streams(loaded, heads, args)
        return
    plain = run(loaded, None, "off", 1, prompt, args.tokens)["tokens"]

    def right(miss: int = 0) -> OracleHeads:
        return OracleHeads(heads, prompt + plain + [0] * 8, start=0, miss=miss)

    variants = {
        "off": lambda: (None, "off", 1),
        "on k=1": lambda: (heads, "on", 1),
        "auto k=1": lambda: (heads, "auto", 1),
        "right k=1": lambda: (right(), "on", 1),
        "right k=3": lambda: (right(), "on", 3),
        "right k=3 miss 3": lambda: (right(3), "on", 3),
    }
    results: dict[str, list[dict]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, make in variants.items():
            results[name].append(run(loaded, *make(), prompt, args.tokens))
    report(results, plain, f"{folder.name}, {args.tokens} tokens")


def streams(loaded, heads, args) -> None:
    """The variants with ``args.streams`` streams in the batch."""
    prompts = [loaded.tokenizer.encode(f"{PROMPT} (stream {i})") for i in range(args.streams)]

    def run_streams(heads_: object, mode: str, k: int) -> dict:
        source = ModelBatchSource(
            loaded.model, drafting=Drafting(mtp_heads=heads_, mtp=mode, mtp_tokens=k)
        )
        return batch_streams(source, prompts, args.tokens)

    plain = run_streams(None, "off", 1)["tokens"]
    # a row's head starts at its first decode step (after the prompt's last call's token)
    sequences = [p + o + [0] * 8 for p, o in zip(prompts, plain, strict=True)]
    starts = [len(p) + 1 for p in prompts]
    variants = {
        "off": lambda: (None, "off", 1),
        "on k=1": lambda: (heads, "on", 1),
        "auto k=1": lambda: (heads, "auto", 1),
        "right k=1": lambda: (RowOracleHeads(heads, sequences, starts), "on", 1),
        "right k=3": lambda: (RowOracleHeads(heads, sequences, starts), "on", 3),
    }
    results: dict[str, list[dict]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, make in variants.items():
            results[name].append(run_streams(*make()))
    report(results, plain, f"{args.streams} streams, {args.tokens} tokens each")


def report(results: dict[str, list[dict]], plain: list, what: str) -> None:
    print(f"load average {os.getloadavg()[0]:.1f}, {what}")
    base = [r["tok_s"] for r in results["off"]]
    for name, rounds in results.items():
        ratios = [r["tok_s"] / b for r, b in zip(rounds, base, strict=True)]
        row = {
            "variant": name,
            "tok_s": round(statistics.median(r["tok_s"] for r in rounds), 1),
            "vs_off_each_round": [round(x, 2) for x in ratios],
            "cpu_ms": round(statistics.median(r["cpu_ms"] for r in rounds), 2),
            "accepted": rounds[-1]["accepted"],
            "same_tokens": all(r["tokens"] == plain for r in rounds),
        }
        print(json.dumps(row))


if __name__ == "__main__":
    main()
