"""Server throughput against raw mlx-lm, and the server's own cost per streamed token.

    python benchmarks/bench_server.py [--tokens 64] [--rounds 3] [--json out.json]

1. Model: the same prompt through raw ``mlx_lm.stream_generate`` (in this process) and
   through ``vllm-mlx serve`` (a subprocess, streaming), alternating, same weights and
   processors; EOS is banned in both so each run produces exactly ``--tokens`` tokens.
   Reported as tokens/s each and their ratio (target >= 0.95).
2. Pipeline: ``vllm-mlx serve --replay`` replays a fixed text at no model cost; the server
   process's CPU time per streamed token (detokenize, parse, SSE, HTTP) at 1 and 8 concurrent
   streams (target <= 200 us/token).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from vllm_mlx.engine.cpu import find_openblas, openblas_preloaded
from vllm_mlx.server.launch import launched_server

PROMPT = [{"role": "user", "content": "Write a short story about a lighthouse keeper."}]
EOS_ID = 2  # SmolLM2 <|im_end|>


def ensure_openblas() -> None:
    """Measure raw mlx-lm under the same BLAS the server uses."""
    library = find_openblas()
    if library and not openblas_preloaded():
        env = {**os.environ, "LD_PRELOAD": library}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)


def raw_mlx_lm(model, tokenizer, tokens: int) -> float:
    from mlx_lm.generate import stream_generate
    from mlx_lm.sample_utils import make_logits_processors

    prompt = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True)
    start, n = time.perf_counter(), 0
    for response in stream_generate(
        model,
        tokenizer,
        prompt,
        max_tokens=tokens,
        logits_processors=make_logits_processors(logit_bias={EOS_ID: -100.0}),
    ):
        n = response.generation_tokens
    return n / (time.perf_counter() - start)


async def stream_once(
    client: httpx.AsyncClient, base: str, tokens: int, logit_bias: bool = True
) -> int:
    body = {
        "model": "x",
        "messages": PROMPT,
        "max_tokens": tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if logit_bias:
        body["logit_bias"] = {str(EOS_ID): -100}
    completion = 0
    async with client.stream("POST", f"{base}/v1/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: {") and '"usage"' in line:
                usage = json.loads(line[6:]).get("usage")
                if usage:
                    completion = usage["completion_tokens"]
    return completion


def server_tps(base: str, tokens: int) -> float:
    async def run() -> float:
        async with httpx.AsyncClient(timeout=None) as client:
            start = time.perf_counter()
            n = await stream_once(client, base, tokens)
            return n / (time.perf_counter() - start)

    return asyncio.run(run())


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pipeline_cost(base: str, pid: int, streams: int, tokens: int) -> dict:
    async def run() -> int:
        async with httpx.AsyncClient(timeout=None) as client:
            counts = await asyncio.gather(
                *(stream_once(client, base, tokens, logit_bias=False) for _ in range(streams))
            )
            return sum(counts)

    cpu0, wall0 = cpu_seconds(pid), time.perf_counter()
    total = asyncio.run(run())
    cpu, wall = cpu_seconds(pid) - cpu0, time.perf_counter() - wall0
    return {
        "streams": streams,
        "tokens": total,
        "server_cpu_us_per_token": cpu / total * 1e6,
        "wall_us_per_token": wall / total * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--replay-tokens", type=int, default=2000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    ensure_openblas()
    from vllm_mlx.models.loader import load_model

    results: dict = {}
    log = Path(tempfile.mkdtemp()) / "server.log"
    loaded = load_model(None, progress=False)
    with launched_server(None, [], log) as server:
        base = server.base_url
        server_tps(base, 8)  # warm-up
        raw_mlx_lm(loaded.model, loaded.tokenizer, 8)
        raw, served = [], []
        for _ in range(args.rounds):
            raw.append(raw_mlx_lm(loaded.model, loaded.tokenizer, args.tokens))
            served.append(server_tps(base, args.tokens))
    results["model"] = {
        "weights": loaded.weights,
        "tokens": args.tokens,
        "rounds": args.rounds,
        "raw_tok_s": statistics.median(raw),
        "server_tok_s": statistics.median(served),
        "ratio": statistics.median(served) / statistics.median(raw),
    }
    del loaded
    print(
        f"model  raw mlx-lm {results['model']['raw_tok_s']:.2f} tok/s  "
        f"server {results['model']['server_tok_s']:.2f} tok/s  "
        f"ratio {results['model']['ratio']:.3f}"
    )

    replay = Path(tempfile.mkdtemp()) / "replay.txt"
    sentence = "The keeper climbed the stairs at dusk, lit the lamp, and watched the sea. "
    replay.write_text(sentence * (args.replay_tokens // 16))
    results["pipeline"] = []
    with launched_server(None, ["--replay", str(replay)], log) as server:
        pipeline_cost(server.base_url, server.pid, 1, 200)  # warm-up
        for streams in (1, 8):
            row = pipeline_cost(server.base_url, server.pid, streams, args.replay_tokens)
            results["pipeline"].append(row)
            print(
                f"pipeline  {streams} stream(s)  {row['tokens']} tokens  "
                f"server CPU {row['server_cpu_us_per_token']:.1f} us/token  "
                f"wall {row['wall_us_per_token']:.1f} us/token"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
