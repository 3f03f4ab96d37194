"""Constrained-decoding cost per backend on the embedded model's 49,152-token vocabulary.

Measures, for each backend: tokenizer-data build time, schema compile time (cold, then cached),
and per-token mask time (p50/p95 µs) while replaying a schema-valid answer token by token, the
mask applied to a real-width logits row as mlx-lm would; the mask time of the other kinds
(regex, choice, Lark, GBNF) on llguidance. Then, through the real pipeline and engine, the
end-to-end decode rate of one prompt unconstrained and under a JSON schema, a regex and a Lark
grammar that cannot complete (same max_tokens, EOS banned by logit_bias, runs interleaved),
and each constrained/unconstrained ratio.

    LD_PRELOAD=.../libopenblas.so.0 python benchmarks/bench_constrained.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import mlx.core as mx

from vllm_mlx.constrained import Constraint, build_logits_processors, from_response_format
from vllm_mlx.constrained.llguidance_backend import llguidance_tokenizer
from vllm_mlx.constrained.lmfe_backend import lmfe_tokenizer_data
from vllm_mlx.constrained.tokenizer_cache import eos_token_ids
from vllm_mlx.models.loader import load_model
from vllm_mlx.options import RuntimeOptions
from vllm_mlx.request import ChatRequest, Sampling
from vllm_mlx.runtime import build_runtime

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


def bench_backend(tokenizer, backend: str, vocab: int, rounds: int) -> dict:
    start = time.perf_counter()
    if backend == "llguidance":
        llguidance_tokenizer(tokenizer)
    else:
        lmfe_tokenizer_data(tokenizer)
    result = {"tokenizer_data_s": round(time.perf_counter() - start, 3), "schemas": {}}
    for name, (schema, answer) in SCHEMAS.items():
        if backend == "lm-format-enforcer":  # lmfe rejects string formats it cannot check
            schema = json.loads(json.dumps(schema).replace(', "format": "email"', ""))
        response_format = from_response_format(
            {"type": "json_schema", "json_schema": {"schema": schema}}
        )
        compile_times = []
        for _ in range(2):
            t0 = time.perf_counter()
            (processor,) = build_logits_processors(
                tokenizer, constraint=response_format, backend=backend
            )
            compile_times.append((time.perf_counter() - t0) * 1e3)
        ids = tokenizer.encode(json.dumps(answer), add_special_tokens=False)
        prompt = [1, 2, 3]
        logits = mx.random.normal((1, vocab))
        mx.eval(logits)
        times, compute = [], []
        for _ in range(rounds):
            (processor,) = build_logits_processors(
                tokenizer, constraint=response_format, backend=backend
            )
            processor(mx.array(prompt), logits)  # the prompt-only first call
            for i in range(1, len(ids) + 1):
                tokens = mx.array(prompt + ids[:i])
                t0 = time.perf_counter()
                mx.eval(processor(tokens, logits))
                times.append((time.perf_counter() - t0) * 1e6)
            assert processor.gave_up is None, processor.gave_up
            # the mask alone (what FACTS.md's library table measures), without applying it
            (processor,) = build_logits_processors(
                tokenizer, constraint=response_format, backend=backend
            )
            for i in range(len(ids) + 1):
                t0 = time.perf_counter()
                processor.constraint.allowed_bits(ids[:i])
                compute.append((time.perf_counter() - t0) * 1e6)
        result["schemas"][name] = {
            "compile_cold_ms": round(compile_times[0], 2),
            "compile_cached_ms": round(compile_times[1], 2),
            "mask_p50_us": round(statistics.median(compute), 1),
            "mask_p95_us": round(percentile(compute, 0.95), 1),
            "mask_and_apply_p50_us": round(statistics.median(times), 1),
            "mask_and_apply_p95_us": round(percentile(times, 0.95), 1),
            "tokens": len(ids),
        }
    return result


# Non-JSON kinds: (constraint, an answer it accepts), for the mask timings.
KINDS = {
    "regex": (
        Constraint("regex", r"[A-Z][a-z]{1,12}( [a-z]{1,12}){2,40}\."),
        "Tell me a long story about a keeper.",
    ),
    "choice": (
        Constraint("choice", ["north", "south", "east", "west by northwest"]),
        "west by northwest",
    ),
    "lark": (
        Constraint("lark", 'start: item ("," " "? item)*\nitem: /[a-z]{1,10}/ "=" /[0-9]{1,4}/'),
        "alpha=1, beta=22, gamma=333, delta=4444, epsilon=5",
    ),
    "gbnf": (
        Constraint("gbnf", 'root ::= item ("," " "? item)*\nitem ::= [a-z]+ "=" [0-9]+'),
        "alpha=1, beta=22, gamma=333, delta=4444, epsilon=5",
    ),
}


def bench_kinds(tokenizer, rounds: int) -> dict:
    """Mask time per kind (the matcher's next-token mask after each prefix of the answer)."""
    out = {}
    for name, (constraint, answer) in KINDS.items():
        ids = tokenizer.encode(answer, add_special_tokens=False)
        t0 = time.perf_counter()
        build_logits_processors(tokenizer, constraint=constraint)
        compile_ms = (time.perf_counter() - t0) * 1e3
        compute = []
        for _ in range(rounds):
            (processor,) = build_logits_processors(tokenizer, constraint=constraint)
            for i in range(len(ids) + 1):
                t0 = time.perf_counter()
                processor.constraint.allowed_bits(ids[:i])
                compute.append((time.perf_counter() - t0) * 1e6)
            assert processor.gave_up is None, processor.gave_up
        out[name] = {
            "compile_cold_ms": round(compile_ms, 2),
            "mask_p50_us": round(statistics.median(compute), 1),
            "mask_p95_us": round(percentile(compute, 0.95), 1),
            "tokens": len(ids),
        }
    return out


def decode_rate(pipeline, response_format: Constraint | None, max_tokens: int, ban: dict) -> float:
    """Decode tokens/s of one greedy request (first token to last, so prefill is excluded)."""
    request = ChatRequest(
        [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}],
        Sampling(temperature=0, logit_bias=dict(ban)),
        max_tokens=max_tokens,
        constraint=response_format,
    )
    prepared = pipeline.prepare_chat(request)
    stamps = []
    last = None
    for event in pipeline.stream_sync(prepared):
        stamps.append(time.perf_counter())
        last = event
    tokens = last.usage.completion_tokens
    assert tokens == max_tokens, (tokens, last.finish_reason, pipeline.tokenizer.eos_token_ids)
    processors = prepared.generation.logits_processors or []
    assert all(p.gave_up is None for p in processors), [p.gave_up for p in processors]
    return (tokens - 1) / (stamps[-1] - stamps[0])


def bench_end_to_end(rounds: int, max_tokens: int, backend: str) -> dict:
    """Constrained vs unconstrained decode rate of the same request, interleaved."""
    runtime = build_runtime(
        None, RuntimeOptions.of(structured_output_backend=backend), progress=False
    )
    try:
        pipeline = runtime.pipeline
        ban = {eos: -1e9 for eos in eos_token_ids(pipeline.tokenizer)}
        # A string that cannot end within max_tokens: the constraint stays active throughout.
        schema = {
            "type": "object",
            "properties": {"story": {"type": "string", "minLength": 24 * max_tokens}},
            "required": ["story"],
        }
        # ... and for the other kinds, text that cannot end within max_tokens either.
        floor = 24 * max_tokens
        kinds = {
            "json_schema": Constraint("json_schema", schema),
            "regex": Constraint("regex", rf"[^<>]{{{floor},}}"),
            "lark": Constraint("lark", f"start: /[^<>]{{{floor},}}/"),
        }
        for constraint in kinds.values():
            decode_rate(pipeline, constraint, 8, ban)  # warm-up: caches, compile
        free: list[float] = []
        bound: dict[str, list[float]] = {name: [] for name in kinds}
        for _ in range(rounds):
            free.append(decode_rate(pipeline, None, max_tokens, ban))
            for name, constraint in kinds.items():
                bound[name].append(decode_rate(pipeline, constraint, max_tokens, ban))
        report: dict = {
            "backend": backend,
            "max_tokens": max_tokens,
            "unconstrained_tok_s": round(statistics.median(free), 2),
        }
        for name, rates in bound.items():
            ratios = [b / f for b, f in zip(rates, free, strict=True)]
            report[name] = {
                "constrained_tok_s": round(statistics.median(rates), 2),
                "ratio_median": round(statistics.median(ratios), 3),
                "ratio_of_medians": round(statistics.median(rates) / statistics.median(free), 3),
            }
        return report
    finally:
        runtime.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="replays / e2e pairs")
    parser.add_argument("--max-tokens", type=int, default=64, help="e2e tokens per request")
    parser.add_argument("--skip-masks", action="store_true", help="only the e2e ratio")
    parser.add_argument("--skip-e2e", action="store_true", help="only the mask timings")
    args = parser.parse_args()
    report: dict = {}
    if not args.skip_masks:
        tokenizer = load_model(None, progress=False).tokenizer
        vocab = 49152
        for backend in ("llguidance", "lm-format-enforcer"):
            report[backend] = bench_backend(tokenizer, backend, vocab, args.rounds)
        report["kinds"] = bench_kinds(tokenizer, args.rounds)
    if not args.skip_e2e:
        report["end_to_end"] = bench_end_to_end(args.rounds, args.max_tokens, "llguidance")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
