"""How far int16 and int8 activations move the embedded model's outputs from exact float ones.

    python benchmarks/bench_activations_accuracy.py [--chunks 6] [--chunk-tokens 256]
        [--continuations 4] [--continuation-tokens 48]

The products round each group of x to integers against its largest magnitude (int16:
32767 levels, the default; int8: 127, llama.cpp's Q8 activations for Q4_x weights, whose
numbers ``native.set_activations("int8")`` gives through the int16 body). Over real text
(the repo's docs/*.md, tokenized and cut into chunks), the default model (SmolLM2-135M
Q4_1) scores every position under each mode, and this compares int16 and int8 with the
float body (``set_activations("float")``, exact to float rounding):

1. logits: max and mean |delta|, and the largest |delta| relative to the position's logit range;
2. next-token distributions: mean and max KL(float || mode), top-1 agreement;
3. greedy continuations of chunk openings: tokens equal to the float path's before the
   first difference, and whether the whole continuation is equal.

Prints one JSON report.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import make_prompt_cache

from vllm_mlx import native
from vllm_mlx.models import load_model

MODES = ("float", "int16", "int8")
DOCS = Path(__file__).resolve().parent.parent / "docs"


def chunks(tokenizer: Any, count: int, length: int) -> list[list[int]]:
    """``count`` chunks of ``length`` tokens, spread over the docs' text."""
    text = "\n\n".join(path.read_text() for path in sorted(DOCS.glob("*.md")))
    ids = tokenizer.encode(text)
    stride = max(length, (len(ids) - length) // max(1, count - 1))
    return [ids[i : i + length] for i in range(0, len(ids) - length + 1, stride)][:count]


def scores(model: Any, ids: list[int]) -> np.ndarray:
    """Every position's logits (float64), one prompt call on a fresh cache."""
    logits = model(mx.array([ids]), cache=make_prompt_cache(model))[0]
    return np.array(logits.astype(mx.float32), dtype=np.float64)


def greedy(model: Any, ids: list[int], tokens: int) -> list[int]:
    cache = make_prompt_cache(model)
    token = mx.argmax(model(mx.array([ids]), cache=cache)[:, -1, :], axis=-1)
    out = [token.item()]
    for _ in range(tokens - 1):
        token = mx.argmax(model(token[None], cache=cache)[:, -1, :], axis=-1)
        out.append(token.item())
    return out


def log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def compare(exact: np.ndarray, got: np.ndarray) -> dict[str, float]:
    delta = np.abs(got - exact)
    span = exact.max(axis=-1) - exact.min(axis=-1)
    p_log, q_log = log_softmax(exact), log_softmax(got)
    kl = (np.exp(p_log) * (p_log - q_log)).sum(axis=-1)
    return {
        "max_abs_dlogit": float(delta.max()),
        "mean_abs_dlogit": float(delta.mean()),
        "max_dlogit_over_range": float((delta.max(axis=-1) / span).max()),
        "mean_kl": float(kl.mean()),
        "max_kl": float(kl.max()),
        "top1_agreement": float((exact.argmax(-1) == got.argmax(-1)).mean()),
    }


def common_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(a))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=6)
    parser.add_argument("--chunk-tokens", type=int, default=256)
    parser.add_argument("--continuations", type=int, default=4)
    parser.add_argument("--continuation-tokens", type=int, default=48)
    args = parser.parse_args()
    loaded = load_model(None, cpu_weights="quantized", progress=False)
    assert loaded.kernels.startswith("native"), "the native kernels are not routed"
    model, texts = loaded.model, chunks(loaded.tokenizer, args.chunks, args.chunk_tokens)
    logits: dict[str, list[np.ndarray]] = {mode: [] for mode in MODES}
    continued: dict[str, list[list[int]]] = {mode: [] for mode in MODES}
    try:
        for mode in MODES:
            assert native.set_activations(mode), mode
            logits[mode] = [scores(model, ids) for ids in texts]
            continued[mode] = [
                greedy(model, ids[:64], args.continuation_tokens)
                for ids in texts[: args.continuations]
            ]
    finally:
        native.set_activations("int16")
    exact = np.concatenate(logits["float"])
    report: dict[str, Any] = {
        "load_average": os.getloadavg()[0],
        "positions": int(exact.shape[0]),
        "vocabulary": int(exact.shape[1]),
    }
    for mode in MODES[1:]:
        figures = compare(exact, np.concatenate(logits[mode]))
        prefixes = [
            common_prefix(want, got)
            for want, got in zip(continued["float"], continued[mode], strict=True)
        ]
        figures["greedy_equal_prefix"] = prefixes
        figures["greedy_equal_continuations"] = sum(p == args.continuation_tokens for p in prefixes)
        report[f"{mode} vs float"] = figures
    report["int8 vs int16"] = compare(
        np.concatenate(logits["int16"]), np.concatenate(logits["int8"])
    )
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
