"""The two engines of benchmarks/bench_agent_shapes.py, each served in its own process.

    python benchmarks/agent_shapes_engines.py {ours|llama.cpp} CONFIG_JSON

reads one JSON command a line on stdin (``{"op": "prefill", "ids": [...]}``) and answers
each with one ``@@``-prefixed JSON line on stdout. Ours is the runtime ``vllm-mlx serve``
builds, driven through its engine with token prompts; llama.cpp is llama-cpp-python on the
same GGUF with ``THREADS`` threads, like ours.
"""

from __future__ import annotations

import importlib
import json
import sys
import threading
import time
import traceback
from pathlib import Path

import numpy as np

OURS, LLAMA = "ours", "llama.cpp"
THREADS = 2
TEXT_SOURCES = sorted((Path(__file__).resolve().parent.parent / "docs").glob("*.md"))
TEXT_CHARS = 60_000  # > 8k tokens of the docs
CHAT = "Write a short Python function that returns the sum of a list, then explain it."
EDIT_FILE_MODULE = "textwrap"  # the standard library's: the same text on every run
# (this phrasing got the most of the file repeated by the embedded model, which copies
# ≈20% of a 1.5k-token file and ≈60% of a 700-token one)
EDIT_ASK = (
    "Here is a Python file:\n\n```python\n{file}\n```\n\n"
    "Repeat the file exactly, with `TextWrapper` renamed to `LineWrapper`."
)
GREEDY = {"temperature": 0.0}
SAMPLED = {"temperature": 0.8, "seed": 1}


def measured_prefill(run) -> dict:
    """A prefill's seconds to the first token (``run`` returns the submit time and the
    stamps), its CPU seconds (this process: all threads), the resident-memory high-water
    mark during it (Linux: ``clear_refs`` 5 restarts ``VmHWM`` at the current resident
    size) and what that adds to the resident size at its start (what the process already
    held, earlier prompts in a prefix cache among it, left out), in GB."""
    status = Path("/proc/self/status")

    def sizes() -> dict[str, float]:
        lines = status.read_text().splitlines() if status.exists() else []
        return {ln.split(":")[0]: int(ln.split()[1]) / (1 << 20) for ln in lines if "kB" in ln}

    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    resident = sizes().get("VmRSS")
    cpu = time.process_time()
    start, stamps, _ = run()
    answer = {"s": stamps[0][0] - start, "cpu_s": time.process_time() - cpu}
    peak = sizes().get("VmHWM")
    if peak is not None and resident is not None:
        answer["peak_gb"], answer["added_gb"] = peak, peak - resident
    return answer


# -- ours ------------------------------------------------------------------------------------


class Ours:
    """Our runtime, as ``vllm-mlx serve`` builds it, driven through its engine."""

    def __init__(self, options: dict, lookup: dict[str, dict]):
        """``lookup``: the options of the edit row's runs without (``off``) and with
        (``on``) prompt lookup; by default ``prompt_lookup=off/on`` when the runtime has
        that option."""
        from vllm_mlx.options import RuntimeOptions, option_names
        from vllm_mlx.runtime import build_runtime

        self._build = lambda extra: build_runtime(
            None, RuntimeOptions.of(**{**options, **extra}), progress=False
        )
        self.runtime = self._build({})
        if not lookup and "prompt_lookup" in option_names(RuntimeOptions):
            lookup = {"off": {"prompt_lookup": "off"}, "on": {"prompt_lookup": "on"}}
        self.lookup = lookup
        self._edit_runtimes: dict = {}
        self.tokenizer = self.runtime.loaded.tokenizer
        self.ban_eos = {t: -1e9 for t in self.tokenizer.eos_token_ids}
        docs = "\n\n".join(p.read_text() for p in TEXT_SOURCES)
        self._text = self.tokenizer.encode(docs[:TEXT_CHARS])

    def close(self) -> None:
        self.runtime.close()
        for runtime in self._edit_runtimes.values():
            runtime.close()

    # prompts: built here, sent to both engines as token ids
    def prompt(self, kind: str, nonce: int, n: int = 0) -> dict:
        encode = self.tokenizer.encode
        if kind == "text":  # n tokens of the project's docs after a nonce line
            head = encode(f"Session {nonce}.\n", add_special_tokens=False)
            return {"ids": head + self._text[: n - len(head)]}
        if kind == "chat":
            return {"ids": self._chat(f"({nonce}) {CHAT}")}
        if kind == "edit":  # the first n tokens' worth of whole lines of a stdlib module
            source = importlib.import_module(EDIT_FILE_MODULE).__file__
            lines, kept = Path(str(source)).read_text().splitlines(), []
            while lines and len(encode("\n".join([*kept, lines[0]]))) <= n:
                kept.append(lines.pop(0))
            body = "\n".join(kept)
            ids = self._chat(f"({nonce}) " + EDIT_ASK.format(file=body))
            return {"ids": ids, "file_tokens": len(encode(body)), "eos": self._eos()}
        raise ValueError(kind)

    def _chat(self, text: str) -> list[int]:
        messages = [{"role": "user", "content": text}]
        return list(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True))

    def _eos(self) -> list[int]:
        return sorted(self.tokenizer.eos_token_ids)

    def _request(self, ids, max_tokens, options, ban_eos=True):
        from vllm_mlx.engine.generation import GenerationRequest
        from vllm_mlx.engine.sampling import SamplingParams

        bias = self.ban_eos if ban_eos else {}
        params = SamplingParams(max_tokens=max_tokens, logit_bias=bias, **options)
        return GenerationRequest(list(ids), params)

    def _stamps(self, request, engine=None) -> tuple[float, list[tuple[float, int]], list]:
        """(submit time, [(arrival, tokens)] per chunk with tokens, token ids)."""
        engine = engine or self.runtime.engine
        start, stamps, ids = time.perf_counter(), [], []
        for chunk in engine.generate_sync(request):
            if chunk.token_ids:
                stamps.append((time.perf_counter(), len(chunk.token_ids)))
                ids += chunk.token_ids
        if not stamps:
            raise RuntimeError(f"no token: {chunk.finish_reason} {chunk.error!r}")
        return start, stamps, ids

    def prefill(self, ids: list[int]) -> dict:
        return measured_prefill(lambda: self._stamps(self._request(ids, 1, GREEDY)))

    def decode(self, ids: list[int], tokens: int, options: dict) -> dict:
        _, stamps, out = self._stamps(self._request(ids, tokens, options))
        return {"tok_s": decode_rate(stamps), "ids": out}

    def streams(self, prompts: list[list[int]], tokens: int) -> dict:
        """Aggregate tok/s while every stream decodes: tokens arriving after the last
        stream's first token and before the first stream's end, over that span."""
        runs: list[list[tuple[float, int]]] = [[] for _ in prompts]
        gate = threading.Barrier(len(prompts))

        def run(i: int) -> None:
            gate.wait()
            runs[i] = self._stamps(self._request(prompts[i], tokens, {**SAMPLED, "seed": i}))[1]

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        begin, end = max(r[0][0] for r in runs), min(r[-1][0] for r in runs)
        count = sum(n for r in runs for at, n in r if begin < at <= end)
        return {"tok_s": count / (end - begin)}

    def contention(self, long_ids, short_ids, stream_ids, chain_tokens, arrive_after) -> dict:
        """A sampled stream running (a chain of requests, so its context stays short), the
        long prompt submitted, the short chat ``arrive_after`` seconds later."""
        alone_short = self.prefill(short_ids)["s"]
        alone_gaps = self._chain(stream_ids, chain_tokens)
        window: dict = {}

        def during() -> None:
            window["start"] = time.perf_counter()
            done = threading.Thread(target=lambda: window.update(long=self.prefill(long_ids)))
            done.start()
            time.sleep(arrive_after)
            window["short"] = self.prefill(short_ids)["s"]
            done.join()
            window["end"] = time.perf_counter()

        gaps = self._chain(stream_ids, chain_tokens, during, window)
        return {
            "short_alone_s": alone_short,
            "short_during_s": window["short"],
            "gap_p95_alone_ms": 1e3 * float(np.percentile(alone_gaps, 95)),
            "gap_p95_during_ms": 1e3 * float(np.percentile(gaps, 95)),
            "long_during_s": window["long"]["s"],
            "short_arrived_before_long_ended": arrive_after < window["long"]["s"],
        }

    def _chain(self, ids, tokens, during=None, window=None) -> list[float]:
        """Gaps between a running stream's tokens (each request's first token excluded):
        alone, one request of ``tokens``; with ``during``, requests back to back (so the
        context stays short) until ``during`` returns, gaps inside ``window`` only."""
        stop, stamps = threading.Event(), []

        def chain() -> None:
            for seed in range(1_000_000):
                request = self._request(ids, tokens, {**SAMPLED, "seed": seed})
                last = None
                for chunk in self.runtime.engine.generate_sync(request):
                    now = time.perf_counter()
                    if chunk.token_ids:
                        if last is not None:
                            stamps.append((last, now))
                        last = now
                    if stop.is_set():
                        return
                if during is None:
                    return

        runner = threading.Thread(target=chain)
        runner.start()
        if during is not None:
            while len(stamps) < 4:
                time.sleep(0.01)
            during()
            stop.set()
        runner.join()
        lo, hi = (window["start"], window["end"]) if window else (0.0, float("inf"))
        return [b - a for a, b in stamps if lo <= a and b <= hi] or [float("nan")]

    def cached(self, prefix: list[int], suffix: list[int]) -> dict:
        self.prefill(prefix)  # stores the prefix in the prefix cache
        turn = self.prefill(prefix + suffix)
        return {"s": turn["s"], "cpu_s": turn["cpu_s"]}

    def edit(self, ids: list[int], tokens: int, lookup: bool, eos: list[int]) -> dict:
        """(``eos``: the engine stops at the tokenizer's own.)"""
        mode = "on" if lookup else "off"
        if mode not in self.lookup:
            if lookup:
                return {"skipped": "this tree has no prompt_lookup option (nor --lookup-on)"}
            runtime = self.runtime
        else:
            if mode not in self._edit_runtimes:
                self._edit_runtimes[mode] = self._build(self.lookup[mode])
            runtime = self._edit_runtimes[mode]
        request = self._request(ids, tokens, GREEDY, ban_eos=False)
        _, stamps, out = self._stamps(request, runtime.engine)
        return {"tok_s": decode_rate(stamps), "ids": out, "copied": copied(out, ids)}

    def sampler(self) -> dict:
        """ms per token of the sampler and penalty processors on a 49k row."""
        import mlx.core as mx

        from vllm_mlx.engine import sampling
        from vllm_mlx.engine.sampling import RequestSampler, SamplingParams
        from vllm_mlx.engine.sampling import make_penalty_processors as penalties

        native = sampling.numerics_of(self.runtime.loaded.model).draw  # None: not built
        vocab = self.runtime.loaded.model.args.vocab_size
        row = mx.random.normal((1, vocab), key=mx.random.key(0)) * 3
        row = row - mx.logsumexp(row, axis=-1, keepdims=True)
        out = {}
        for name, options in (("greedy", GREEDY), ("t=0.8 seeded", SAMPLED)):
            for path, draw in (("native draw", native), ("MLX ops", None)):
                if draw is None and path == "native draw":
                    continue
                params = SamplingParams(**options, logit_bias=self.ban_eos)
                sampler, processors = RequestSampler(params, draw), penalties(params)
                context, times = mx.arange(20), []
                for _ in range(30):
                    start = time.perf_counter()
                    x = row
                    for processor in processors:
                        x = processor(context, x)
                    mx.eval(sampler(x))
                    times.append(time.perf_counter() - start)
                out[f"{name}, {path}"] = 1e3 * float(np.median(times))
        return out


# -- llama.cpp -------------------------------------------------------------------------------


class LlamaCpp:
    """llama-cpp-python on the same GGUF; one context, reused like its server's slot."""

    def __init__(self, n_ctx: int):
        from llama_cpp import Llama

        from vllm_mlx.models.default_model import default_gguf
        from vllm_mlx.models.resolve import cache_root

        self.path = str(default_gguf(cache_root()))
        self.llm = Llama(self.path, n_ctx=n_ctx, **self._common())
        self._lookup = None

    @staticmethod
    def _common() -> dict:
        return {"n_batch": 512, "n_threads": THREADS, "n_threads_batch": THREADS, "verbose": False}

    def close(self) -> None:
        self.llm.close()

    def _generate(self, llm, ids, tokens, options, eos=(), reset=True):
        """(submit time, [(arrival, 1)] per token, token ids)."""
        if reset:
            llm.reset()
        temp = options.get("temperature", 0.0)
        llm.set_seed(options.get("seed", 0))
        start, stamps, out = time.perf_counter(), [], []
        # the full distribution at temperature 0.8, as ours samples it
        for token in llm.generate(ids, temp=temp, top_k=0, top_p=1.0, min_p=0.0, reset=True):
            stamps.append((time.perf_counter(), 1))
            out.append(int(token))
            if len(out) >= tokens or token in eos:
                break
        return start, stamps, out

    def prefill(self, ids: list[int]) -> dict:
        return measured_prefill(lambda: self._generate(self.llm, ids, 1, GREEDY))

    def decode(self, ids: list[int], tokens: int, options: dict) -> dict:
        _, stamps, out = self._generate(self.llm, ids, tokens, options)
        return {"tok_s": decode_rate(stamps), "ids": out}

    def cached(self, prefix: list[int], suffix: list[int]) -> dict:
        self._generate(self.llm, prefix, 1, GREEDY)
        turn = measured_prefill(
            lambda: self._generate(self.llm, prefix + suffix, 1, GREEDY, reset=False)
        )
        return {"s": turn["s"], "cpu_s": turn["cpu_s"]}

    def edit(self, ids: list[int], tokens: int, lookup: bool, eos: list[int]) -> dict:
        llm = self.llm
        if lookup:
            if self._lookup is None:
                from llama_cpp import Llama
                from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

                # a draft makes llama-cpp-python keep every position's logits (a context
                # sized for this row only), but it sizes that buffer from ``logits_all``
                # alone: without it the buffer has n_batch rows and the first batch past
                # them fails to broadcast into a (0,)-shaped slice
                self._lookup = Llama(
                    self.path,
                    n_ctx=len(ids) + tokens + 16,
                    logits_all=True,
                    draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10),
                    **self._common(),
                )
            llm = self._lookup
        _, stamps, out = self._generate(llm, ids, tokens, GREEDY, eos=set(eos))
        return {"tok_s": decode_rate(stamps), "ids": out, "copied": copied(out, ids)}


# -- measures shared by both ----------------------------------------------------------------


def decode_rate(stamps: list[tuple[float, int]]) -> float:
    """Tokens per second after the first token."""
    count = sum(n for _, n in stamps[1:])
    return count / (stamps[-1][0] - stamps[0][0]) if count else float("nan")


def copied(out: list[int], prompt: list[int], n: int = 4) -> float:
    """Fraction of the answer's token n-grams that occur in the prompt."""
    seen = {tuple(prompt[i : i + n]) for i in range(len(prompt) - n + 1)}
    grams = [tuple(out[i : i + n]) for i in range(len(out) - n + 1)]
    return sum(g in seen for g in grams) / len(grams) if grams else float("nan")


def serve(kind: str, argv: list[str]) -> None:
    """A worker: one JSON command a line on stdin, one ``@@``-prefixed JSON answer each."""
    config = json.loads(argv[0])
    engine: Ours | LlamaCpp
    if kind == OURS:
        engine = Ours(config["options"], config["lookup"])
    else:
        engine = LlamaCpp(config["n_ctx"])
    print("@@" + json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        try:
            answer = getattr(engine, command.pop("op"))(**command)
        except Exception:
            answer = {"error": traceback.format_exc()}
        print("@@" + json.dumps(answer), flush=True)
    engine.close()


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2:])
