"""Constrained-decoding cost per backend on the embedded model's 49,152-token vocabulary.

Measures, for each backend: tokenizer-data build time, schema compile time (cold, then cached),
and per-token mask time (p50/p95 µs) while replaying a schema-valid answer token by token, the
mask applied to a real-width logits row as mlx-lm would. The end-to-end constrained vs
unconstrained tokens/s ratio is measured through the server by the lead's benchmark.

    python benchmarks/bench_constrained.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import mlx.core as mx

from vllm_mlx.constrained import build_logits_processors
from vllm_mlx.constrained.llguidance_backend import llguidance_tokenizer
from vllm_mlx.constrained.lmfe_backend import lmfe_tokenizer_data
from vllm_mlx.models.loader import load_model

SCHEMAS = {
    "person": (
        {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "age": {"type": "integer"},
                "email": {"type": "string", "format": "email"},
            },
            "required": ["name", "age"],
        },
        {"name": "Ada Lovelace", "age": 36},
    ),
    "nested": (
        {
            "type": "object",
            "properties": {
                "items": {
                    "type": "array",
                    "items": {"$ref": "#/$defs/item"},
                    "maxItems": 4,
                },
                "status": {"enum": ["ok", "error"]},
            },
            "required": ["items", "status"],
            "$defs": {
                "item": {
                    "type": "object",
                    "properties": {"id": {"type": "integer"}, "label": {"type": "string"}},
                    "required": ["id", "label"],
                }
            },
        },
        {"items": [{"id": 1, "label": "first item"}, {"id": 2, "label": "second"}], "status": "ok"},
    ),
}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_backend(tokenizer, backend: str, vocab: int) -> dict:
    start = time.perf_counter()
    if backend == "llguidance":
        llguidance_tokenizer(tokenizer)
    else:
        lmfe_tokenizer_data(tokenizer)
    result = {"tokenizer_data_s": round(time.perf_counter() - start, 3), "schemas": {}}
    for name, (schema, answer) in SCHEMAS.items():
        if backend == "lm-format-enforcer":  # lmfe rejects string formats it cannot check
            schema = json.loads(json.dumps(schema).replace(', "format": "email"', ""))
        response_format = {"type": "json_schema", "json_schema": {"schema": schema}}
        compile_times = []
        for _ in range(2):
            t0 = time.perf_counter()
            (processor,) = build_logits_processors(
                tokenizer, response_format=response_format, backend=backend
            )
            compile_times.append((time.perf_counter() - t0) * 1e3)
        ids = tokenizer.encode(json.dumps(answer), add_special_tokens=False)
        prompt = [1, 2, 3]
        logits = mx.zeros((1, vocab))
        times = []
        for i in range(len(ids) + 1):
            tokens = mx.array(prompt + ids[:i])
            t0 = time.perf_counter()
            masked = processor(tokens, logits)
            mx.eval(masked)
            times.append((time.perf_counter() - t0) * 1e6)
        assert processor.gave_up is None, processor.gave_up
        result["schemas"][name] = {
            "compile_cold_ms": round(compile_times[0], 2),
            "compile_cached_ms": round(compile_times[1], 2),
            "mask_p50_us": round(statistics.median(times[1:]), 1),
            "mask_p95_us": round(percentile(times[1:], 0.95), 1),
            "tokens": len(ids),
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    loaded = load_model(None, progress=False)
    tokenizer = loaded.tokenizer
    vocab = 49152
    report = {b: bench_backend(tokenizer, b, vocab) for b in ("llguidance", "lm-format-enforcer")}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
