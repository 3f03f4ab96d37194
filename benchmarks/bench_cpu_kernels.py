"""The native CPU kernels against MLX's own paths, side by side in one run.

    python benchmarks/bench_cpu_kernels.py [--decode-tokens 32] [--long-context 2000]

1. Memory bandwidth: a STREAM-like copy (numpy, one and two threads) in this run.
2. Kernel GB/s: every quantized matmul of the default model for one token (M=1), a
   4-token batch and a 64-token block, native (float16 and float32 scales) vs
   ``mx.quantized_matmul``: bytes of weights + scales + biases read / wall time, and
   those bytes (what one decode step reads for its matmuls).
3. End to end, one subprocess per path (so RSS is each path's own): decode tok/s after a
   128-token and a ``--long-context`` prompt, prefill tok/s, TTFT of an 8-token suffix on
   a cached long prefix, peak RSS. Paths: native-quantized, float32 + OpenBLAS, and MLX's
   stock quantized path (its long-context rows are skipped: ~8 tok/s prefill).
4. The same rows for llama.cpp on the same GGUF (the default model's), when
   ``llama-cpp-python`` is importable (it is not a dependency: it builds from source for
   minutes; ``pip install llama-cpp-python`` to get the column), and ours / llama.cpp.
All subprocesses preload OpenBLAS when it is installed, as ``vllm-mlx serve`` does.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np

from vllm_mlx.engine.cpu import find_openblas

PATHS = {  # name -> (cpu_weights, environment)
    "native": ("quantized", {"VLLM_MLX_NATIVE": "1", "VLLM_MLX_NATIVE_F16": "1"}),
    # the same kernels on float32 scales and biases (8 bytes per group, not 4)
    "native-f32": ("quantized", {"VLLM_MLX_NATIVE": "1", "VLLM_MLX_NATIVE_F16": "0"}),
    "float32": ("float32", {"VLLM_MLX_NATIVE": "0"}),
    "stock": ("quantized", {"VLLM_MLX_NATIVE": "0"}),
}
LLAMA_CPP = "llama.cpp"  # measured when llama-cpp-python is importable


def copy_bandwidth(mb: int = 256, threads: int = 2, rounds: int = 5) -> float:
    """GB/s of a STREAM 'copy' (bytes read + written) with ``threads`` numpy threads."""
    src = np.ones(mb * 1024 * 1024 // 4, dtype=np.float32)
    dst = np.empty_like(src)
    parts = np.array_split(np.arange(src.size), threads)
    spans = [(p[0], p[-1] + 1) for p in parts]
    best = float("inf")
    for _ in range(rounds):
        workers = [threading.Thread(target=np.copyto, args=(dst[a:b], src[a:b])) for a, b in spans]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        best = min(best, time.perf_counter() - start)
    return 2 * src.nbytes / best / 1e9


def kernel_bandwidth(rows: int, path: str, reps: int) -> tuple[float, int]:
    """(GB/s, bytes) over all of the default model's quantized matmuls for ``rows`` rows."""
    import mlx.core as mx
    import mlx.nn as nn

    from vllm_mlx.models import load_model

    os.environ.update(PATHS[path][1])
    model = load_model(None, cpu_weights="quantized", progress=False).model
    layers = [m for _, m in model.named_modules() if isinstance(m, nn.QuantizedLinear)]
    embedding = model.model.embed_tokens
    xs = {
        k: mx.random.normal((rows, k)) for k in {m.weight.shape[1] * 32 // m.bits for m in layers}
    }
    dims = embedding.weight.shape[1] * 32 // embedding.bits
    xs.setdefault(dims, mx.random.normal((rows, dims)))
    mx.eval(list(xs.values()))
    nbytes = sum(m.weight.nbytes + m.scales.nbytes + m.biases.nbytes for m in [*layers, embedding])

    def step():
        outs = [m(xs[m.weight.shape[1] * 32 // m.bits]) for m in layers]
        mx.eval(*outs, embedding.as_linear(xs[dims]))

    step()
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - start)
    return nbytes / best / 1e9, nbytes


def resident_gb(field: str = "VmRSS") -> float:
    """This process's resident set now (VmRSS) or at its peak (VmHWM), in GB. Not
    ru_maxrss: Linux carries that over from the parent across fork + exec."""
    with open("/proc/self/status") as status:
        line = next(row for row in status if row.startswith(f"{field}:"))
    return int(line.split()[1]) / 1e6


def worker(path: str, decode_tokens: int, long_context: int, skip_long: bool) -> dict:
    """One path's end-to-end figures (runs in its own process)."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step
    from mlx_lm.models.cache import make_prompt_cache

    from vllm_mlx import native
    from vllm_mlx.models import load_model

    loaded = load_model(None, cpu_weights=PATHS[path][0], progress=False)
    model = loaded.model
    rng = np.random.default_rng(0)

    def run(prompt_len: int, tokens: int, cache=None) -> tuple[float, float, object]:
        """(time to first token, decode tok/s after it, cache); CPU ms/token into cpu_ms."""
        prompt = mx.array(rng.integers(100, 40000, prompt_len).tolist())
        cache = cache if cache is not None else make_prompt_cache(model)
        start = time.perf_counter()
        first = cpu_first = None
        steps = generate_step(
            prompt, model, max_tokens=tokens, prompt_cache=cache, prefill_step_size=512
        )
        for i, _ in enumerate(steps):
            if i == 0:
                first, cpu_first = time.perf_counter(), time.process_time()
        end = time.perf_counter()
        cpu_ms.append(1e3 * (time.process_time() - cpu_first) / max(1, tokens - 1))
        return first - start, (tokens - 1) / (end - first), cache

    cpu_ms: list[float] = []
    run(16, 4)  # warm-up
    out: dict = {"kernels": loaded.kernels, "native": native.status()}
    _, out["decode_tok_s@128"], _ = run(128, decode_tokens)
    out["decode_cpu_ms_per_token@128"] = cpu_ms[-1]  # CPU time: robust to a shared machine
    if not skip_long:
        ttft, out[f"decode_tok_s@{long_context}"], cache = run(long_context, decode_tokens)
        out[f"decode_cpu_ms_per_token@{long_context}"] = cpu_ms[-1]
        out["prefill_tok_s"] = long_context / ttft
        # one live context, as llama.cpp's worker has: weights + its KV cache + buffers
        out["rss_gb"] = resident_gb()
        del cache
        prefix = make_prompt_cache(model)
        run(long_context - 8, 1, prefix)
        out["ttft_cached_prefix_s"] = run(8, 2, copy.deepcopy(prefix))[0]
    else:
        ttft, _, _ = run(256, 2)
        out["prefill_tok_s"] = 256 / ttft
    out["load_average"] = os.getloadavg()[0]
    out.setdefault("rss_gb", resident_gb())
    out["peak_rss_gb"] = resident_gb("VmHWM")
    return out


def llama_cpp_worker(decode_tokens: int, long_context: int) -> dict:
    """llama.cpp's figures on the default model's GGUF, measured like ``worker``'s."""
    import llama_cpp
    from llama_cpp import Llama

    from vllm_mlx.models.default_model import default_gguf
    from vllm_mlx.models.resolve import cache_root

    threads = os.cpu_count() or 1
    llm = Llama(
        model_path=str(default_gguf(cache_root())),
        n_ctx=long_context + decode_tokens + 16,
        n_batch=512,
        n_threads=threads,
        n_threads_batch=threads,
        verbose=False,
    )
    rng = np.random.default_rng(0)
    vocab = llm.n_vocab()

    def next_token() -> int:
        """Greedy pick from the last position's logits (llm.scores holds them only with
        logits_all, which would make llama.cpp compute every position's logits)."""
        logits = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(logits, shape=(vocab,))))

    def tokens(n: int) -> list[int]:
        return rng.integers(100, 40000, n).tolist()

    def prefill(ids: list[int]) -> float:
        start = time.perf_counter()
        llm.eval(ids)
        next_token()  # the first token
        return time.perf_counter() - start

    def decode(count: int) -> tuple[float, float]:
        """(tok/s, CPU ms per token) of ``count`` greedy one-token steps."""
        token = next_token()
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(count):
            llm.eval([token])
            token = next_token()
        wall = time.perf_counter() - start
        return count / wall, 1e3 * (time.process_time() - cpu) / count

    out: dict = {"kernels": f"llama.cpp ({threads} threads)"}
    llm.reset()
    prefill(tokens(16))
    decode(3)  # warm-up
    llm.reset()
    prefill(tokens(128))
    out["decode_tok_s@128"], out["decode_cpu_ms_per_token@128"] = decode(decode_tokens - 1)
    llm.reset()
    ttft = prefill(tokens(long_context))
    out["prefill_tok_s"] = long_context / ttft
    key = f"decode_tok_s@{long_context}"
    out[key], out[f"decode_cpu_ms_per_token@{long_context}"] = decode(decode_tokens - 1)
    out["rss_gb"] = resident_gb()  # the same point as the native worker's
    llm.reset()
    prefill(tokens(long_context - 8))
    out["ttft_cached_prefix_s"] = prefill(tokens(8))
    out["load_average"] = os.getloadavg()[0]
    out["peak_rss_gb"] = resident_gb("VmHWM")
    return out


def run_worker(path: str, args: argparse.Namespace) -> dict:
    env = {**os.environ, **(PATHS[path][1] if path in PATHS else {})}
    if (blas := find_openblas()) and "openblas" not in env.get("LD_PRELOAD", ""):
        env["LD_PRELOAD"] = blas
    command = [sys.executable, __file__, "--worker", path]
    command += [
        "--decode-tokens",
        str(args.decode_tokens),
        "--long-context",
        str(args.long_context),
    ]
    if path == "stock":
        command.append("--skip-long")
    if path == LLAMA_CPP:
        env.pop("LD_PRELOAD", None)  # its own BLAS build links what it needs
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decode-tokens", type=int, default=32)
    parser.add_argument("--long-context", type=int, default=2000)
    default_paths = "native,float32,stock"
    if importlib.util.find_spec("llama_cpp") is not None:
        default_paths += f",{LLAMA_CPP}"
    parser.add_argument("--paths", default=default_paths)
    parser.add_argument("--worker", choices=[*sorted(PATHS), LLAMA_CPP])
    parser.add_argument("--skip-kernels", action="store_true", help="no kernel GB/s rows")
    parser.add_argument("--skip-long", action="store_true")
    args = parser.parse_args()
    if args.worker == LLAMA_CPP:
        print(json.dumps(llama_cpp_worker(args.decode_tokens, args.long_context)))
        return
    if args.worker:
        figures = worker(args.worker, args.decode_tokens, args.long_context, args.skip_long)
        print(json.dumps(figures))
        return
    report: dict = {"copy_gb_s": {t: round(copy_bandwidth(threads=t), 2) for t in (1, 2)}}
    if not args.skip_kernels:
        report["kernel_gb_s"], report["matmul_mb_per_token"] = {}, {}
        for rows, reps in ((1, 10), (4, 5), (64, 3)):
            for name in ("native", "native-f32", "stock"):
                if not (name == "stock" and rows == 64):
                    gb_s, nbytes = kernel_bandwidth(rows, name, reps)
                    report["kernel_gb_s"][f"{name}@M={rows}"] = round(gb_s, 2)
                    report["matmul_mb_per_token"][name] = round(nbytes / 1e6, 1)
    print(json.dumps(report, indent=1), flush=True)
    paths = {name: run_worker(name, args) for name in args.paths.split(",")}
    report["paths"] = paths
    if "native" in paths:
        base = paths["native"]
        report["ratios_native_over"] = {
            other: {
                key: round(base[key] / value, 2)
                for key, value in figures.items()
                if isinstance(value, float) and key in base and value
            }
            for other, figures in paths.items()
            if other != "native"
        }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
