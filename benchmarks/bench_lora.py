"""Decode speed with adapters in the batch, side by side in one run, on the default model.

    python benchmarks/bench_lora.py [--steps 48] [--rounds 2] [--rank 8] [--layers 16]

Two adapters are made with mlx-lm's own ``linear_to_lora_layers`` (mlx_lm.lora's defaults:
the last 16 layers, every linear layer in them, rank 8, scale 20; ``lora_b`` random), loaded
on the base as the server loads them, and three sequences decoded through the server's batch
source (``ModelBatchSource``) in one batch:

- base x3: three base sequences (no adapter row: the native fused path);
- base + 2 adapters: one base sequence and one for each adapter (mlx-lm's layers plus the
  low-rank products per row);
- base x1: one base sequence alone, for scale;
- fused x3: three sequences on a second copy of the base with the first adapter merged in
  (``--adapter-fuse``; quantized layers quantized again, so the native fused path runs).

Rounds alternate the shapes; reported: aggregate decode tok/s (tokens after every sequence's
first, over the wall time of those steps) and the ratio to base x3.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm.tuner.lora import LoRALinear
from mlx_lm.tuner.utils import linear_to_lora_layers
from mlx_lm.utils import load

from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.models import load_model
from vllm_mlx.models.adapter_set import AdapterSet
from vllm_mlx.models.adapters import read_adapter
from vllm_mlx.models.lora import fuse_adapter

PROMPT_TEXT = "Write a short note about the history of the bicycle and why people like it."


def write_adapter(base: Path, folder: Path, seed: int, rank: int, layers: int) -> Path:
    model = load(str(base))[0]
    model.freeze()
    params = {"rank": rank, "scale": 20.0, "dropout": 0.0}
    linear_to_lora_layers(model, layers, params)
    mx.random.seed(seed)
    for _, module in model.named_modules():
        if isinstance(module, LoRALinear):
            module.lora_b = mx.random.normal(module.lora_b.shape) * 0.01
    folder.mkdir(parents=True)
    weights = dict(tree_flatten(model.trainable_parameters()))
    mx.save_safetensors(str(folder / "adapters.safetensors"), weights)
    config = {"fine_tune_type": "lora", "num_layers": layers, "lora_parameters": params}
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


def greedy(logprobs: mx.array) -> mx.array:
    return mx.argmax(logprobs, axis=-1)


def decode_rate(source: ModelBatchSource, prompt: list[int], choices: list, steps: int) -> float:
    """Aggregate tok/s of the steps after every sequence has its first token."""
    running = set()
    for choice in choices:
        extra = {"adapter": choice} if choice is not None else {}
        uid, _ = source.insert(prompt, sampler=greedy, processors=[], max_tokens=steps, **extra)
        running.add(uid)
    started: set[int] = set()
    tokens, t0 = 0, 0.0
    while running:
        produced, _ = source.step()
        for step in produced:
            if step.at_limit:
                running.discard(step.uid)
            if len(started) == len(choices):
                tokens += 1
            started.add(step.uid)
        if len(started) == len(choices) and t0 == 0.0:
            t0 = time.perf_counter()
    return tokens / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--layers", type=int, default=16)
    args = parser.parse_args()
    loaded = load_model(None, progress=False)
    adapters = AdapterSet(loaded.model)
    fused = load_model(None, progress=False)
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(("a1", "a2")):
            folder = write_adapter(loaded.path, Path(tmp) / name, i, args.rank, args.layers)
            adapters.load(name, folder)
            if name == "a1":
                fuse_adapter(fused.model, read_adapter(folder, fused.model))
    a1, a2 = (adapters.get(n).choice for n in ("a1", "a2"))  # type: ignore[union-attr]
    source = ModelBatchSource(loaded.model, adapter_rows=adapters.rows)
    fused_source = ModelBatchSource(fused.model)
    prompt = loaded.tokenizer.encode(PROMPT_TEXT)
    shapes = {
        "base x3": (source, [None, None, None]),
        "base + 2 adapters": (source, [None, a1, a2]),
        "base x1": (source, [None]),
        "fused x3": (fused_source, [None, None, None]),
    }
    decode_rate(source, prompt, [None, a1], 4)  # warm-up of every path
    decode_rate(fused_source, prompt, [None], 4)
    rates: dict[str, list[float]] = {name: [] for name in shapes}
    for _ in range(args.rounds):
        for name, (runs_on, choices) in shapes.items():
            rates[name].append(decode_rate(runs_on, prompt, choices, args.steps))
    print(
        f"{loaded.name}, {loaded.kernels.split(':')[0]}, {len(prompt)}-token prompt, "
        f"{args.steps} tokens each, rank {args.rank} on {args.layers} layers "
        f"({adapters.nbytes / 1e6:.1f} MB of adapters), load {os.getloadavg()[0]:.1f}"
    )
    best = {name: max(values) for name, values in rates.items()}
    for name, values in rates.items():
        listed = ", ".join(f"{v:.1f}" for v in values)
        print(
            f"  {name:18s} {best[name]:6.1f} tok/s  (rounds: {listed})  "
            f"x{best[name] / best['base x3']:.2f} of base x3"
        )


if __name__ == "__main__":
    main()
