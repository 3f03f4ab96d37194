"""The BF16 attention bodies (vdpbf16ps, AMX tiles) against the float one on the embedded
model over real text.

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 \\
        python benchmarks/bench_bf16_attention.py [--context 8192] [--continue 32]

Accuracy: the repo's docs/*.md as one token stream, prefilled in 512-token calls by three
runs side by side, each on its own cache: today's attention ("float" body, float16 KV),
the "bf16" body (float16 KV, rounded to bf16 in the kernel), the "amx" body (the same
roundings, the products on AMX tiles) and the float body on a
float32 KV cache (the rounding today's float16 cache already accepts, as a scale). Each
run's logits at every position are compared with today's: max and mean |Δlogit|, the
mean and max KL(today || run), top-1 agreement; at 2k and at the full context each run
then continues greedily (``--continue`` tokens) and the tokens are compared.

Speed (``--speed``): ``native.attention`` alone (32 query rows over 1k-8k float16 keys,
9 query heads over 3 KV heads, head size 64) and prefill CPU time per token of 32-token
calls at 1k/2k/4k/8k of context on the embedded model, the bodies this CPU has
alternating in one process, medians over rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

HERE = Path(__file__).resolve().parent.parent
RUNS = {
    "today": ("float", "f16"),
    "bf16": ("bf16", "f16"),
    "amx": ("amx", "f16"),
    "f32_kv": ("float", "f32"),
}
CHUNK = 512


def text_tokens(tokenizer: Any, n: int) -> list[int]:
    text = "\n\n".join(p.read_text() for p in sorted((HERE / "docs").glob("*.md")))
    ids = list(tokenizer.encode(text))
    if len(ids) < n:
        raise SystemExit(f"docs/*.md give {len(ids)} tokens, fewer than {n}")
    return ids[:n]


def select(run: str) -> None:
    from vllm_mlx import native
    from vllm_mlx.native.layers import KV_ENV

    body, kv = RUNS[run]
    assert native.set_attention_body(body), body
    os.environ[KV_ENV] = kv


def compare(want: mx.array, got: mx.array) -> dict[str, np.ndarray]:
    """Per position: max |Δlogit|, mean |Δlogit|, KL(want || got), top-1 equal."""
    diff = mx.abs(got - want)
    lw = want - mx.logsumexp(want, axis=-1, keepdims=True)
    lg = got - mx.logsumexp(got, axis=-1, keepdims=True)
    kl = mx.sum(mx.exp(lw) * (lw - lg), axis=-1)
    top = mx.argmax(want, axis=-1) == mx.argmax(got, axis=-1)
    out = (diff.max(axis=-1), diff.mean(axis=-1), kl, top)
    return {k: np.array(v) for k, v in zip(("max", "mean", "kl", "top1"), out, strict=True)}


def greedy(model: Any, cache: list[Any], last: mx.array, n: int) -> list[int]:
    """n greedy tokens after logits ``last``, then the cache trimmed back."""
    tokens = []
    token = int(np.asarray(mx.argmax(last)))
    for _ in range(n):
        tokens.append(token)
        logits = model(mx.array([[token]]), cache=cache)[0, -1]
        token = int(np.asarray(mx.argmax(logits)))
    for c in cache:
        c.trim(n)
    return tokens


def accuracy(context: int, continue_n: int) -> dict[str, Any]:
    from mlx_lm.models.cache import make_prompt_cache

    from vllm_mlx import native
    from vllm_mlx.models.loader import load_model

    # the bodies this CPU has (no AMX-BF16, or not granted: no "amx" run)
    runs = [run for run, (body, _) in RUNS.items() if native.set_attention_body(body)]

    loaded = load_model(None, progress=False)
    model = loaded.model
    ids = text_tokens(loaded.tokenizer, context)
    caches = {run: make_prompt_cache(model) for run in runs}
    stats: dict[str, list[dict[str, np.ndarray]]] = {run: [] for run in runs if run != "today"}
    checkpoints = sorted({2048, context})
    continuations: dict[int, dict[str, list[int]]] = {}
    seconds = {run: 0.0 for run in runs}
    for start in range(0, context, CHUNK):
        chunk = mx.array([ids[start : start + CHUNK]])
        logits = {}
        for run in runs:
            select(run)
            cpu = time.process_time()
            logits[run] = model(chunk, cache=caches[run])[0]
            mx.eval(logits[run])
            seconds[run] += time.process_time() - cpu
        for run in stats:
            stats[run].append(compare(logits["today"], logits[run]))
        end = start + chunk.shape[1]
        if end in checkpoints:
            continuations[end] = {}
            for run in runs:
                select(run)
                continuations[end][run] = greedy(model, caches[run], logits[run][-1], continue_n)
    report: dict[str, Any] = {
        "context": context,
        "tokens_from": "docs/*.md",
        "prefill_cpu_s": seconds,
    }
    windows = {"0-2k": (0, 2048), f"{context - 2048}-{context}": (context - 2048, context)}
    for run, parts in stats.items():
        merged = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        report[run] = {}
        for name, (a, b) in windows.items():
            m = {k: v[a:b] for k, v in merged.items()}
            report[run][name] = {
                "max_abs_dlogit": float(m["max"].max()),
                "mean_abs_dlogit": float(m["mean"].mean()),
                "mean_kl": float(m["kl"].mean()),
                "max_kl": float(m["kl"].max()),
                "top1_agree": float(m["top1"].mean()),
            }
        for at, tokens in continuations.items():
            base, other = tokens["today"], tokens[run]
            same = next(
                (i for i, (x, y) in enumerate(zip(base, other, strict=True)) if x != y), len(base)
            )
            report[run][f"greedy_at_{at}"] = {"same_prefix": same, "of": len(base)}
    return report


def _cpu() -> float:
    return time.process_time()


def speed(rounds: int) -> dict[str, Any]:
    from mlx_lm.models.cache import make_prompt_cache

    from vllm_mlx import native
    from vllm_mlx.models.loader import load_model

    rng = np.random.default_rng(0)
    bodies = tuple(b for b in ("float", "bf16", "amx") if native.set_attention_body(b))
    kernel: dict[int, dict[str, float]] = {}
    for lk in (1024, 2048, 4096, 8192):
        q = mx.array(rng.standard_normal((1, 9, 32, 64)).astype(np.float32))
        k = mx.array(rng.standard_normal((1, 3, lk, 64)).astype(np.float32)).astype(mx.float16)
        v = mx.array(rng.standard_normal((1, 3, lk, 64)).astype(np.float32)).astype(mx.float16)
        mx.eval(q, k, v)
        times: dict[str, list[float]] = {b: [] for b in bodies}
        for _ in range(rounds):
            for body in bodies:
                native.set_attention_body(body)
                cpu = _cpu()
                for _ in range(10):
                    mx.eval(native.attention(q, k, v, 0.125, True))
                times[body].append((_cpu() - cpu) / 10)
        med = {b: statistics.median(t) for b, t in times.items()}
        macs = 9 * 32 * lk * 64 * 2
        kernel[lk] = {
            **{f"{b}_ms": round(med[b] * 1e3, 2) for b in bodies},
            **{f"{b}_gmac_per_cpu_s": round(macs / med[b] / 1e9, 1) for b in bodies},
            **{f"float_over_{b}": round(med["float"] / med[b], 2) for b in bodies[1:]},
        }
    loaded = load_model(None, progress=False)
    model = loaded.model
    ids = text_tokens(loaded.tokenizer, 8192 + 32)
    # CPU ms per token of one 32-token call at each context, the bodies alternating on
    # one cache (filled once; each timed call trimmed off again)
    at = (1024, 2048, 4096, 8192)
    per_token: dict[str, dict[int, list[float]]] = {b: {n: [] for n in at} for b in bodies}
    cache = make_prompt_cache(model)
    done = 0
    for n in at:
        while done < n:  # fill to n in 512-token calls
            step = min(512, n - done)
            mx.eval(model(mx.array([ids[done : done + step]]), cache=cache))
            done += step
        for _ in range(rounds):
            for body in bodies:
                native.set_attention_body(body)
                cpu = _cpu()
                mx.eval(model(mx.array([ids[n : n + 32]]), cache=cache))
                per_token[body][n].append((_cpu() - cpu) / 32 * 1e3)
                for c in cache:
                    c.trim(32)
    prefill = {
        b: {n: round(statistics.median(v), 2) for n, v in rows.items()}
        for b, rows in per_token.items()
    }
    ratio = {b: round(prefill[b][2048] / prefill[b][8192], 3) for b in bodies}
    return {
        "kernel": kernel,
        "prefill_cpu_ms_per_token": prefill,
        "tok_cpu_s_8k_over_2k": ratio,
        "load": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--context", type=int, default=8192)
    parser.add_argument("--continue", dest="continue_n", type=int, default=32)
    parser.add_argument("--speed", action="store_true", help="the A/B timing instead")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.speed:
        print(json.dumps(speed(args.rounds), indent=1))
    else:
        print(json.dumps(accuracy(args.context, args.continue_n), indent=1))


if __name__ == "__main__":
    main()
