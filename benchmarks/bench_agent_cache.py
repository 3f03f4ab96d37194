"""The prefix cache in an agent's life, side by side in one run.

    python benchmarks/bench_agent_cache.py [--system-tokens 1024] [--turns 10]

1. Restart: `vllm-mlx serve --prefix-cache-dir DIR` answers a chat with a long system
   prompt (cold), is stopped, started again over the same DIR, and answers the same system
   prompt with a new user message: TTFT cold vs after the restart (the prefix read from disk).
2. Replay: a 10-turn conversation in which the client rewrites every previous assistant turn
   (as agents do when they drop reasoning or re-serialize tool calls); per turn, the fraction
   of prompt tokens served from the cache. Run on the default model (trimmable KV: reuse up
   to the rewrite) and on a tiny random hybrid conv/attention model (LFM2 layout, a cache that
   cannot be trimmed) with message-boundary checkpoints on and off.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx
import mlx.core as mx
from mlx_lm.models import lfm2

from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.prefix_cache import PrefixCache
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.options import RuntimeOptions
from vllm_mlx.pipeline import Pipeline
from vllm_mlx.request import ChatRequest, Sampling
from vllm_mlx.runtime import build_runtime
from vllm_mlx.server.launch import launched_server

RULES = (
    "Rule {i}: read the file before you edit it, keep the change minimal, run the tests that "
    "cover it, and report what you changed and why in one short paragraph. "
)


def system_prompt(tokenizer, tokens: int) -> str:
    text, i = "", 0
    while len(tokenizer.encode(text)) < tokens:
        text += RULES.format(i=i)
        i += 1
    return text


def ttft(base: str, messages: list[dict]) -> tuple[float, int]:
    body = {
        "model": "m",
        "messages": messages,
        "max_tokens": 4,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start, first, cached = time.perf_counter(), None, 0
    with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=None) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{r.status_code}: {r.read().decode()}")
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            delta = chunk["choices"][0]["delta"] if chunk.get("choices") else {}
            if first is None and delta.get("content"):
                first = time.perf_counter() - start
            if chunk.get("usage"):
                cached = chunk["usage"]["prompt_tokens_details"]["cached_tokens"]
    return first or time.perf_counter() - start, cached


def restart(system: str) -> dict:
    root = Path(tempfile.mkdtemp())
    args = ["--prefix-cache-dir", str(root / "cache")]
    with launched_server(None, args, root / "first.log") as server:
        cold = ttft(server.base_url, [{"role": "system", "content": system}, _user(0)])
    print((root / "first.log").read_text()[-600:], file=sys.stderr)
    with launched_server(None, args, root / "second.log") as server:
        warm = ttft(server.base_url, [{"role": "system", "content": system}, _user(1)])
    files = sum(f.stat().st_size for f in (root / "cache").rglob("*.safetensors"))
    shutil.rmtree(root)
    return {
        "cold_ttft_s": round(cold[0], 2),
        "restart_ttft_s": round(warm[0], 2),
        "restart_cached_tokens": warm[1],
        "ratio": round(warm[0] / cold[0], 3),
        "disk_mb": round(files / 2**20, 1),
    }


def _user(i: int) -> dict:
    return {"role": "user", "content": f"Step {i}: open src/module_{i}.py and fix the bug."}


def replay(pipeline: Pipeline, system: str, turns: int) -> list[float]:
    """Per turn, cached / prompt tokens; every earlier assistant turn is resent rewritten."""
    history, fractions = [{"role": "system", "content": system}], []
    for i in range(turns):
        history.append(_user(i))
        request = ChatRequest(
            messages=list(history),
            sampling=Sampling(temperature=0.0),
            max_tokens=12,
        )
        result = pipeline.complete_sync(pipeline.prepare_chat(request))
        fractions.append(result.usage.cached_tokens / result.usage.prompt_tokens)
        history.append({"role": "assistant", "content": f"(edited) {result.message.content}"})
    return fractions


def tiny_hybrid(vocab: int) -> lfm2.Model:
    mx.random.seed(0)
    model = lfm2.Model(
        lfm2.ModelArgs(
            model_type="lfm2",
            vocab_size=vocab,
            hidden_size=64,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=8192,
            norm_eps=1e-5,
            conv_bias=False,
            conv_L_cache=3,
            block_dim=64,
            block_multiple_of=8,
            block_ffn_dim_multiplier=1.0,
            block_auto_adjust_ff_dim=False,
            intermediate_size=128,
            full_attn_idxs=[1, 3],
        )
    )
    mx.eval(model.parameters())
    return model


def hybrid_pipeline(model, tokenizer, checkpoints: bool) -> Pipeline:
    source = ModelBatchSource(model, prefix_cache=PrefixCache(512 << 20))
    source.checkpointing = checkpoints
    return Pipeline(
        Engine(source, tokenizer), context_length=8192, options=RuntimeOptions.of(max_tokens=12)
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--system-tokens", type=int, default=1024)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--only", choices=["replay", "restart"])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    runtime = build_runtime(None, progress=False)
    tokenizer = runtime.loaded.tokenizer
    system = system_prompt(tokenizer, args.system_tokens)
    result: dict = {}
    try:
        if args.only != "restart":
            result["replay_default_model"] = replay(runtime.pipeline, system, args.turns)
    finally:
        runtime.close()
    hybrid = tiny_hybrid(len(tokenizer.get_vocab()))
    for on in (True, False) if args.only != "restart" else ():
        pipeline = hybrid_pipeline(hybrid, tokenizer, on)
        try:
            key = f"replay_hybrid_checkpoints_{'on' if on else 'off'}"
            result[key] = replay(pipeline, system, args.turns)
        finally:
            pipeline.engine.close()
    if args.only != "replay":
        result["restart"] = restart(system)
    for key, value in result.items():
        shown = value if isinstance(value, dict) else " ".join(f"{f:.2f}" for f in value)
        print(f"{key}: {shown}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
