"""An agent's shapes, ours and llama.cpp side by side in one run on the same GGUF.

    python benchmarks/bench_agent_shapes.py [--rounds 2] [--quick] [--engines ours,llama.cpp]

Each engine is a long-lived worker process holding its model (agent_shapes_engines.py; ours:
the runtime the server builds, driven through its engine with token prompts; llama.cpp:
llama-cpp-python on the embedded model's Q4_1 GGUF, 2 threads like ours); a round runs
every row on both, the order alternating between rounds, and every ratio is taken within a
round (median and range over rounds). Every prompt starts with its own nonce, so nothing
is served from a cache unless the row says so. Rows (the issue's table plus 8k prefill, 8
streams and an edit-shaped workload):

- prefill of a 4,534-token prompt alone (tok/s); 2,000 and 8,000 tokens, and 8k / 2k;
- decode of a short chat at temperature 0.8 (seeded, full vocabulary) and greedy, and
  sampled / greedy; both ban EOS (ours with a logit bias; llama.cpp never stops by itself);
- 4 and 8 sampled streams' aggregate tok/s over 1 stream's (ours: llama-cpp-python has no
  batching);
- a short chat arriving during the long prompt's prefill while a sampled stream runs: its
  TTFT, the stream's p95 gap while the long prompt runs, and the long prompt's own time,
  each against the same thing alone (ours: llama.cpp serves one sequence at a time);
- TTFT of 8 new tokens on a cached 2,000-token prefix (llama.cpp reusing the same prefix
  in its context, as its server's slots do);
- edit-shaped: a 1.5k-token file in the prompt, the answer (greedy) rewriting it, decode
  tok/s without and with prompt lookup (llama.cpp: ``LlamaPromptLookupDecoding``; ours:
  ``prompt_lookup=off`` / ``on``, or ``--lookup-off`` / ``--lookup-on``), whether the
  two answers are the same tokens, and how much of the answer the prompt holds (the
  fraction of its 4-grams found in the prompt).

Ours alone also: the sampler + penalty processors per token on a 49k row, native draw and
MLX's ops.

llama.cpp is not a dependency. Build llama-cpp-python with the machine's vector extensions
minus AMX (which traps in these VMs: ``-march=native`` dies with "invalid opcode"; needs
``libopenblas-dev``), ≈10–90 min on a loaded 2-core machine:

    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \\
      -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON \\
      -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \\
      -DGGML_BLAS=ON -DGGML_BLAS_VENDOR=OpenBLAS" CMAKE_BUILD_PARALLEL_LEVEL=1 \\
      nice -n 10 pip install llama-cpp-python

Without it the llama.cpp column says so and the rest runs. Results and what they leave
out: docs/performance.md ("Agent shapes, side by side with llama.cpp").
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from agent_shapes_engines import GREEDY, LLAMA, OURS, SAMPLED

ENGINES = Path(__file__).resolve().parent / "agent_shapes_engines.py"
FULL = {
    "long": 4534, "short_ctx": 2000, "long_ctx": 8000, "cached_prefix": 2000, "new": 8,
    "decode": 128, "streams": (1, 4, 8), "stream_tokens": 64, "chain_tokens": 64,
    "edit_file": 1500, "edit_tokens": 800,
}  # fmt: skip
QUICK = {
    "long": 384, "short_ctx": 128, "long_ctx": 512, "cached_prefix": 256, "new": 8,
    "decode": 16, "streams": (1, 2), "stream_tokens": 8, "chain_tokens": 8,
    "edit_file": 120, "edit_tokens": 24,
}  # fmt: skip


# -- the run: both workers loaded, rounds alternating -----------------------------------------


class WorkerError(RuntimeError):
    """A command the worker answered with its traceback."""


class Worker:
    """A worker process and its command channel."""

    def __init__(self, kind: str, config: dict):
        from vllm_mlx.engine.cpu import find_openblas

        env = dict(os.environ)
        if (
            kind == OURS
            and (blas := find_openblas())
            and "openblas" not in env.get("LD_PRELOAD", "")
        ):
            env["LD_PRELOAD"] = blas  # as `vllm-mlx serve` re-executes itself
        if kind == LLAMA:
            env.pop("LD_PRELOAD", None)  # its build links its own BLAS
            # OpenMP's threads spin while they wait: on a shared, loaded machine that made
            # llama.cpp decode at 1–2 tok/s with 2 threads (11–17 passive, 19–21 with one)
            env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        command = [sys.executable, str(ENGINES), kind, json.dumps(config)]
        self.kind = kind
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        self._answer()

    def call(self, op: str, **values) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **values}) + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def _answer(self) -> dict:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("@@"):
                answer = json.loads(line[2:])
                if "error" in answer:
                    raise WorkerError(f"{self.kind} worker: {answer['error']}")
                return answer
        raise RuntimeError(f"{self.kind} worker exited ({self.proc.wait()})")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=120)


GROUPS = ("prefill", "decode", "streams", "contention", "cached", "edit", "sampler")


def one_round(index: int, workers: dict[str, Worker], size: dict, rec: Record, groups) -> None:
    """Every row of ``groups`` once, into ``rec``; progress on stderr."""
    ours, llama = workers[OURS], workers.get(LLAMA)
    order = [ours, llama] if index % 2 == 0 else [llama, ours]
    order = [w for w in order if w is not None]
    nonce = iter(range(1000 * index + 1, 1000 * (index + 1)))

    def prompt(kind: str, n: int = 0) -> dict:
        return ours.call("prompt", kind=kind, nonce=next(nonce), n=n)

    def both(op: str, **values) -> dict[str, dict]:
        """Each engine's answer; one that failed is recorded and left out."""
        answers = {}
        for worker in order:
            try:
                answers[worker.kind] = worker.call(op, **values)
            except WorkerError as error:
                rec("failed", f"{op} on {worker.kind}", str(error)[-600:])
                print(f"round {index + 1}: {op} failed on {worker.kind}: {error}", file=sys.stderr)
        return answers

    def prefill() -> None:
        for key in ("long", "short_ctx", "long_ctx"):
            n = size[key]
            for kind, answer in both("prefill", ids=prompt("text", n)["ids"]).items():
                rec(f"prefill {n}", kind, n / answer["s"])
                rec(f"prefill {n} per CPU s", kind, n / answer["cpu_s"])
                if "peak_gb" in answer:
                    rec(f"prefill {n} peak GB", kind, answer["peak_gb"])
                    rec(f"prefill {n} added GB", kind, answer["added_gb"])
                if key == "long":
                    rec("long alone s", kind, answer["s"])

    def decode() -> None:
        chat = prompt("chat")["ids"]
        for name, options in (("sampled", SAMPLED), ("greedy", GREEDY)):
            tokens = size["decode"]
            for kind, answer in both("decode", ids=chat, tokens=tokens, options=options).items():
                rec(f"decode {name}", kind, answer["tok_s"])

    def streams() -> None:
        for k in size["streams"]:
            prompts = [prompt("chat")["ids"] for _ in range(k)]
            answer = ours.call("streams", prompts=prompts, tokens=size["stream_tokens"])
            rec(f"streams {k}", OURS, answer["tok_s"])

    def contention() -> None:
        if len(rec.get("long alone s", OURS)) <= index:  # prefill not run this round
            rec(
                "long alone s",
                OURS,
                ours.call("prefill", ids=prompt("text", size["long"])["ids"])["s"],
            )
        answer = ours.call(
            "contention",
            long_ids=prompt("text", size["long"])["ids"],
            short_ids=prompt("chat")["ids"],
            stream_ids=prompt("chat")["ids"],
            chain_tokens=size["chain_tokens"],
            arrive_after=0.25 * rec.last("long alone s", OURS),
        )
        for key, value in answer.items():
            rec(f"contention {key}", OURS, value)

    def cached() -> None:
        prefix, suffix = prompt("text", size["cached_prefix"]), prompt("text", size["new"])
        for kind, answer in both("cached", prefix=prefix["ids"], suffix=suffix["ids"]).items():
            rec("cached ttft", kind, answer["s"])
            rec("cached cpu", kind, answer["cpu_s"])

    def edit() -> None:
        edit = prompt("edit", size["edit_file"])
        rec("edit file tokens", OURS, edit["file_tokens"])
        outputs: dict = {}
        for lookup in (False, True):
            name = "lookup" if lookup else "plain"
            for kind, answer in both(
                "edit", ids=edit["ids"], tokens=size["edit_tokens"], lookup=lookup, eos=edit["eos"]
            ).items():
                if "skipped" in answer:
                    rec(f"edit {name} skipped", kind, answer["skipped"])
                    continue
                rec(f"edit {name}", kind, answer["tok_s"])
                rec(f"edit {name} tokens", kind, len(answer["ids"]))
                rec(f"edit {name} copied", kind, answer["copied"])
                outputs[kind, lookup] = answer["ids"]
        for kind in workers:
            if (kind, True) in outputs:
                rec("edit same tokens", kind, outputs[kind, False] == outputs[kind, True])

    def sampler() -> None:
        if index == 0:
            for key, value in ours.call("sampler").items():
                rec(f"sampler ms {key}", OURS, value)

    runs = {f.__name__: f for f in (prefill, decode, streams, contention, cached, edit, sampler)}
    for group in groups:
        start = time.perf_counter()
        try:
            runs[group]()
        except WorkerError as error:  # the other rows still run; the table says what failed
            rec("failed", group, str(error)[-600:])
            print(f"round {index + 1}: {group} failed: {error}", file=sys.stderr)
        rec("load average", group, os.getloadavg()[0])
        rec.save()
        took = time.perf_counter() - start
        print(
            f"round {index + 1}: {group} {took:.0f} s, load {os.getloadavg()[0]:.1f}",
            file=sys.stderr,
        )


class Record:
    """Values by row and engine, one per round; written to ``path`` as they come."""

    def __init__(self, path: Path | None, size: dict):
        self.values: dict[str, dict[str, list]] = {}
        self.path, self.size = path, size

    def save(self) -> None:
        if self.path is not None:
            self.path.write_text(json.dumps({"size": self.size, "values": self.values}, indent=1))

    def __call__(self, row: str, engine: str, value) -> None:
        self.values.setdefault(row, {}).setdefault(engine, []).append(value)

    def last(self, row: str, engine: str):
        return self.values[row][engine][-1]

    def get(self, row: str, engine: str) -> list:
        return self.values.get(row, {}).get(engine, [])


def spread(values: list, digits: int = 2, unit: str = "") -> str:
    """Median (min–max) over rounds."""
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not numbers:
        return "—"
    median = f"{np.median(numbers):.{digits}f}{unit}"
    if len(numbers) == 1:
        return median
    return f"{median} ({min(numbers):.{digits}f}–{max(numbers):.{digits}f})"


def times(values: list) -> str:
    return spread(values) + "×" if values else "—"


def per_round(a: list, b: list) -> list[float]:
    return [x / y for x, y in zip(a, b, strict=False) if isinstance(x, (int, float)) and y]


def table(rec: Record, size: dict, llama_note: str) -> str:
    """The markdown table: value per engine, ratio within each round."""
    get = rec.get
    lines = [
        "| row | ours | llama.cpp | ours / llama.cpp | target |",
        "|---|---|---|---|---|",
    ]

    def side(label: str, row: str, target: str = "", digits: int = 2) -> None:
        ours, llama = get(row, OURS), get(row, LLAMA)
        llama_cell = spread(llama, digits) if llama else llama_note
        ratio = times(per_round(ours, llama)) if llama else "—"
        lines.append(f"| {label} | {spread(ours, digits)} | {llama_cell} | {ratio} | {target} |")

    def own(label: str, ours: str, llama: str = "—", target: str = "") -> None:
        lines.append(f"| {label} | {ours} | {llama} | — | {target} |")

    def ratio_of(a: str, b: str, engine: str = OURS) -> list[float]:
        return per_round(get(a, engine), get(b, engine))

    long, short, big = size["long"], size["short_ctx"], size["long_ctx"]
    side(f"prefill of a {long:,}-token prompt alone, tok/s", f"prefill {long}", digits=1)
    side(f"prefill {short:,} tokens, tok/s", f"prefill {short}", digits=1)
    side(f"prefill {big:,} tokens, tok/s", f"prefill {big}", digits=1)
    own(
        f"prefill tok/s at {big:,} / at {short:,}",
        times(ratio_of(f"prefill {big}", f"prefill {short}")),
        times(ratio_of(f"prefill {big}", f"prefill {short}", LLAMA)),
        "≥ 0.7× (ours)",
    )
    own(
        f"the same per CPU-second (all threads): at {big:,} / at {short:,}",
        times(ratio_of(f"prefill {big} per CPU s", f"prefill {short} per CPU s")),
        times(ratio_of(f"prefill {big} per CPU s", f"prefill {short} per CPU s", LLAMA)),
    )
    side(f"peak resident memory during the {big:,}-token prefill, GB", f"prefill {big} peak GB")
    side("the same above the resident size at the prompt's start, GB", f"prefill {big} added GB")
    side("decode at temperature 0.8 (seeded), tok/s", "decode sampled", digits=1)
    side("decode greedy, same prompt, tok/s", "decode greedy", digits=1)
    own(
        "sampled / greedy",
        times(ratio_of("decode sampled", "decode greedy")),
        times(ratio_of("decode sampled", "decode greedy", LLAMA)),
        "≈ 1 (ours)",
    )
    one = size["streams"][0]
    for k in size["streams"][1:]:
        agg = spread(get(f"streams {k}", OURS), 1)
        cell = f"{times(ratio_of(f'streams {k}', f'streams {one}'))} ({agg} tok/s)"
        goal = {4: "≥ 3×", 8: "≥ 4.5×"}.get(k, "")
        own(f"{k} sampled streams aggregate / {one} stream", cell, "no batching", goal)
    c = "contention "
    during, alone = get(c + "short_during_s", OURS), get(c + "short_alone_s", OURS)
    ratio = spread(per_round(during, alone))
    bound = [3 * a + 1 for a in alone]
    own(
        "a short chat arriving during that long prefill: TTFT during / alone",
        f"{spread(during)} s / {spread(alone)} s = {ratio}×",
        "one sequence at a time",
        f"≤ 3× alone + 1 s ({spread(bound)} s)",
    )
    during, alone = get(c + "gap_p95_during_ms", OURS), get(c + "gap_p95_alone_ms", OURS)
    own(
        "a stream already running during it: p95 gap during / alone",
        f"{spread(during, 1)} ms / {spread(alone, 1)} ms = {spread(per_round(during, alone))}×",
        "—",
        "≤ 4×",
    )
    during, alone = get(c + "long_during_s", OURS), get("long alone s", OURS)
    own(
        "the long prompt's time together / alone",
        f"{spread(during, 1)} s / {spread(alone, 1)} s = {spread(per_round(during, alone))}×",
        "—",
        "≤ 1.3×",
    )
    side(
        f"TTFT of {size['new']} new tokens on a cached {size['cached_prefix']:,} prefix, s",
        "cached ttft",
        "ours / llama.cpp ≤ 1",
        digits=3,
    )
    side("the same turn's CPU seconds (the engine's process, all threads)", "cached cpu", digits=3)
    file_tokens = spread(get("edit file tokens", OURS), 0)
    side(f"edit ({file_tokens}-token file): decode tok/s, no lookup", "edit plain", digits=1)
    skipped = get("edit lookup skipped", OURS)
    if skipped:
        own(
            "edit: with prompt lookup, tok/s",
            f"not run: {skipped[0]}",
            spread(get("edit lookup", LLAMA), 1),
        )
    else:
        side("edit: with prompt lookup, tok/s", "edit lookup", digits=1)
    own(
        "edit: lookup / no lookup",
        times(ratio_of("edit lookup", "edit plain")),
        times(ratio_of("edit lookup", "edit plain", LLAMA)),
    )

    def facts(engine: str) -> str:
        same = get("edit same tokens", engine)
        tokens, share = get("edit plain tokens", engine), get("edit plain copied", engine)
        text = f"{spread(tokens, 0)} tokens, {spread(share)} of 4-grams in the prompt"
        return text + (f"; same tokens with lookup: {all(same)}" if same else "")

    own("edit: the answer", facts(OURS), facts(LLAMA) if get("edit plain", LLAMA) else "—")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="small sizes, minutes")
    parser.add_argument("--engines", default=f"{OURS},{LLAMA}")
    parser.add_argument(
        "--option", action="append", default=[], metavar="NAME=VALUE",
        help="a runtime option of ours by its serve-flag name (JSON value), e.g. max_num_seqs=8",
    )  # fmt: skip
    parser.add_argument(
        "--lookup-on", action="append", default=[], metavar="NAME=VALUE",
        help="the runtime options that turn prompt lookup on (the edit row's second run)",
    )  # fmt: skip
    parser.add_argument(
        "--lookup-off", action="append", default=[], metavar="NAME=VALUE",
        help="the runtime options that turn prompt lookup off (the edit row's first run)",
    )  # fmt: skip
    parser.add_argument("--groups", default=",".join(GROUPS), help="rows to run, in order")
    parser.add_argument("--json", type=Path, help="every value, written as the run goes")
    args = parser.parse_args()
    groups = args.groups.split(",")
    if unknown := set(groups) - set(GROUPS):
        parser.error(f"unknown groups {sorted(unknown)}: choose from {', '.join(GROUPS)}")
    size = QUICK if args.quick else FULL
    engines = args.engines.split(",")
    llama_note = "not measured: llama-cpp-python is not installed (see this file's docstring)"
    has_llama = importlib.util.find_spec("llama_cpp") is not None
    if LLAMA in engines and not has_llama:
        print(llama_note, file=sys.stderr)
    if LLAMA not in engines:
        llama_note = "not measured (--engines)"
    elif has_llama:
        llama_note = "—"  # a row this run left out or that failed (listed below the table)
    lookup = {"on": named(args.lookup_on), "off": named(args.lookup_off)}
    lookup = {mode: options for mode, options in lookup.items() if options}
    n_ctx = max(size["long"], size["long_ctx"], size["cached_prefix"] + size["new"]) + 64
    workers = {OURS: Worker(OURS, {"options": named(args.option), "lookup": lookup})}
    if LLAMA in engines and has_llama:
        workers[LLAMA] = Worker(LLAMA, {"n_ctx": n_ctx})
    rec = Record(args.json, size)
    loads = [os.getloadavg()[0]]
    try:
        warm = workers[OURS].call("prompt", kind="chat", nonce=0)["ids"]
        for worker in workers.values():  # first calls pay one-time costs
            worker.call("decode", ids=warm, tokens=4, options=GREEDY)
        for index in range(args.rounds):
            one_round(index, workers, size, rec, groups)
    finally:
        for worker in workers.values():
            worker.close()
    print(table(rec, size, llama_note))
    for group, errors in rec.values.get("failed", {}).items():
        print(f"\n{group} failed in {len(errors)} round(s): {errors[-1]}")
    loads += [v for group in rec.values.get("load average", {}).values() for v in group]
    print(f"\nload average (1 min) during the run: {min(loads):.2f}–{max(loads):.2f}")


def named(pairs: list[str]) -> dict:
    """``NAME=VALUE`` pairs, each value JSON when it parses (else the string)."""
    out = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        try:
            out[name] = json.loads(value)
        except json.JSONDecodeError:
            out[name] = value
    return out


if __name__ == "__main__":
    main()
