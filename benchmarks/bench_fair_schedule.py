"""Fair scheduling on the embedded model, alone against together in one run: a short chat's
time to first token, a running stream's inter-token gaps and a long prompt's prefill time,
each alone and then all three at once (the stream running, the long prompt arriving, the
short chat arriving during the long prompt's prefill), in alternating rounds.

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 \\
        python benchmarks/bench_fair_schedule.py [--long-tokens 1536] [--rounds 2] \\
        [--decode-steps 32] [--chunk 256]

``--decode-steps`` takes several values (``0,8,16``) to compare schedules in the same run.
The targets: short TTFT together <= 3x alone + 1 s, stream p95 gap together <= 4x alone,
long prefill together <= 1.3x alone. The stream's gaps are those while the long prompt
prefills; its mean gap there is reported too (a p95 lets one gap in twenty be long).
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

from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.generation import GenerationRequest
from vllm_mlx.engine.sampling import SamplingParams
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.models.loader import load_model

FILLER = "def add(a, b):\n    return a + b\n\n"


class Timed:
    """A request consumed in a thread: when each chunk with tokens arrived."""

    def __init__(self, engine: Engine, request: GenerationRequest):
        self.sent = time.perf_counter()
        self.stamps: list[float] = []
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(engine, request), daemon=True)
        self._thread.start()

    def _run(self, engine: Engine, request: GenerationRequest) -> None:
        stream = engine.generate_sync(request)
        for chunk in stream:
            if chunk.token_ids:
                self.stamps.extend([time.perf_counter()] * len(chunk.token_ids))
            if self.stop.is_set():
                break
        stream.close()

    def first(self) -> float:
        return self.stamps[0] - self.sent

    def wait_tokens(self, n: int) -> None:
        while len(self.stamps) < n and self._thread.is_alive():
            time.sleep(0.002)

    def join(self) -> None:
        self._thread.join()

    def gaps(self, start: float, end: float) -> list[float]:
        inside = [t for t in self.stamps if start <= t <= end]
        return [b - a for a, b in zip(inside, inside[1:], strict=False)]


def p95(values: list[float]) -> float:
    return sorted(values)[max(0, int(round(0.95 * len(values))) - 1)]


def alone(engine: Engine, prompts: dict[str, Any], params: dict[str, SamplingParams]) -> dict:
    short = Timed(engine, GenerationRequest(prompts["short"], params["short"]))
    short.join()
    long = Timed(engine, GenerationRequest(prompts["long"], params["long"]))
    long.join()
    stream = Timed(engine, GenerationRequest(prompts["stream"], params["stream"]))
    stream.join()
    gaps = stream.gaps(stream.stamps[1], stream.stamps[-1])
    return {
        "short_ttft": short.first(),
        "long_prefill": long.first(),
        "stream_p95_gap": p95(gaps),
        "stream_mean_gap": statistics.mean(gaps),
    }


def together(engine: Engine, prompts: dict[str, Any], params: dict[str, SamplingParams]) -> dict:
    stream = Timed(engine, GenerationRequest(prompts["stream"], params["stream_long"]))
    stream.wait_tokens(8)
    long = Timed(engine, GenerationRequest(prompts["long"], params["long"]))
    time.sleep(0.5)  # into the long prompt's prefill
    short = Timed(engine, GenerationRequest(prompts["short"], params["short"]))
    short.join()
    long.join()
    stream.stop.set()
    stream.join()
    gaps = stream.gaps(long.sent, long.sent + long.first())
    return {
        "short_ttft": short.first(),
        "long_prefill": long.first(),
        "stream_p95_gap": p95(gaps) if gaps else float("nan"),
        "stream_mean_gap": statistics.mean(gaps) if gaps else float("nan"),
        "stream_gaps": len(gaps),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--long-tokens", type=int, default=1536)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--decode-steps", default="32", help="comma-separated schedules")
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    loaded = load_model(None, progress=False)
    tokenizer = loaded.tokenizer

    def chat(text: str) -> list[int]:
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True
        )

    filler = chat("Read this file.\n" + FILLER * (args.long_tokens // 10))
    ban_eos = {t: -1e9 for t in tokenizer.eos_token_ids}
    params = {
        "short": SamplingParams(temperature=0, max_tokens=4),
        "long": SamplingParams(temperature=0, max_tokens=1),
        "stream": SamplingParams(temperature=0, max_tokens=64, logit_bias=ban_eos),
        "stream_long": SamplingParams(temperature=0, max_tokens=4000, logit_bias=ban_eos),
    }
    schedules = [int(s) for s in args.decode_steps.split(",")]
    engines = {
        k: Engine(
            ModelBatchSource(loaded.model, prefill_step_size=args.chunk, decode_steps_per_chunk=k),
            tokenizer,
        )
        for k in schedules
    }
    rows: dict[tuple[int, str], list[dict]] = {}
    long_tokens = 0
    try:
        for r in range(args.rounds):
            for k, engine in engines.items():
                prompts = {  # a new long prompt each round: nothing cached
                    "long": chat(f"Round {r}, schedule {k}.")[:-5] + filler[: args.long_tokens],
                    "short": chat("Say hi."),
                    "stream": chat("Tell me a long story about a dragon."),
                }
                long_tokens = len(prompts["long"])
                for kind, run in (("alone", alone), ("together", together)):
                    result = run(engine, prompts, params)
                    result["load"] = os.getloadavg()[0]
                    rows.setdefault((k, kind), []).append(result)
                    print(k, kind, {n: round(v, 3) for n, v in result.items()}, flush=True)
    finally:
        for engine in engines.values():
            engine.close()
    report = []
    for k in schedules:
        a = {n: statistics.median(x[n] for x in rows[(k, "alone")]) for n in rows[(k, "alone")][0]}
        t = {
            n: statistics.median(x[n] for x in rows[(k, "together")])
            for n in rows[(k, "together")][0]
        }
        report.append(
            {
                "decode_steps": k,
                "alone": a,
                "together": t,
                "short_ttft_x": t["short_ttft"] / a["short_ttft"],
                "short_ttft_target_s": 3 * a["short_ttft"] + 1,
                "stream_p95_gap_x": t["stream_p95_gap"] / a["stream_p95_gap"],
                "stream_mean_gap_x": t["stream_mean_gap"] / a["stream_mean_gap"],
                "long_prefill_x": t["long_prefill"] / a["long_prefill"],
            }
        )
    print(f"long prompt {long_tokens} tokens, chunk {args.chunk}, rounds {args.rounds}")
    print(
        "| decode steps / chunk | short TTFT alone → together (target) | stream p95 gap "
        "alone → together (×) | stream mean gap × | long prefill alone → together (×) | load |"
    )
    print("|---|---|---|---|---|---|")
    for x in report:
        a, t = x["alone"], x["together"]
        print(
            f"| {x['decode_steps']} | {a['short_ttft']:.2f} → {t['short_ttft']:.2f} s "
            f"(≤ {x['short_ttft_target_s']:.2f}) | {a['stream_p95_gap'] * 1e3:.0f} → "
            f"{t['stream_p95_gap'] * 1e3:.0f} ms ({x['stream_p95_gap_x']:.1f}×) | "
            f"{x['stream_mean_gap_x']:.1f}× | {a['long_prefill']:.1f} → {t['long_prefill']:.1f} s "
            f"({x['long_prefill_x']:.2f}×) | {t['load']:.1f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
