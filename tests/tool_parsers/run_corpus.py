"""Run the parser conformance corpus through `vllm-mlx parse --jsonl` and report.

The corpus (tests/tool_parsers/corpus/<family>.jsonl) holds model outputs with the message a user
should get, taken from the peers' own parser tests (vLLM, SGLang, SMG, llama.cpp; each case
names its source). Every case is parsed whole and streamed in 1/3/7-character chunks through
the stable CLI, not internal imports, so the corpus survives refactors of the parser code.

    PYTHONPATH=/work/main python tests/tool_parsers/run_corpus.py [--chunks 1,3,7] [--family hermes]

Content and reasoning are compared exactly (a failure that differs only in surrounding
whitespace is labelled ``ws``); arguments are compared as parsed JSON; a call id is compared
only where the case gives one (the model's own ids: Kimi ``functions.f:N``, Mistral
``[CALL_ID]``, Nemo's ``"id"`` key).
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
from pathlib import Path

CORPUS = Path(__file__).with_name("corpus")


def load_cases(corpus: Path, families: set[str] | None) -> list[dict]:
    cases = []
    for path in sorted(corpus.glob("*.jsonl")):
        if families and path.stem not in families:
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                case = json.loads(line)
                case["family"] = path.stem
                cases.append(case)
    return cases


def run_cli(cases: list[dict], chunk_size: int | None) -> list[dict]:
    """Parse every case in one `vllm-mlx parse --jsonl` process; one result per case."""
    lines = [
        json.dumps(
            {
                "text": c["text"],
                "tool_call_parser": c.get("tool_call_parser"),
                "reasoning_parser": c.get("reasoning_parser"),
                "tools": c.get("tools"),
                "prompt_tail": c.get("prompt_tail") or "",
            },
            ensure_ascii=False,
        )
        for c in cases
    ]
    cmd = [sys.executable, "-m", "vllm_mlx", "parse", "--jsonl"]
    if chunk_size:
        cmd += ["--chunk-size", str(chunk_size)]
    proc = subprocess.run(
        cmd, input="\n".join(lines) + "\n", capture_output=True, text=True, encoding="utf-8"
    )
    out = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    if len(out) != len(cases):
        sys.exit(
            f"parse --jsonl returned {len(out)} results for {len(cases)} cases:\n{proc.stderr}"
        )
    return out


def _args(text: str):
    try:
        return json.loads(text)
    except (TypeError, json.JSONDecodeError):
        return ("<invalid JSON>", text)


def _shape(message: dict) -> dict:
    """A parse result without the call ids (fresh per parse), to compare modes."""
    if "error" in message:
        return message
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]
    return {**message, "tool_calls": calls}


def compare(expected: dict, got: dict) -> tuple[str, str] | None:
    """None when ``got`` is what the case expects, else (kind, short explanation)."""
    if "error" in got:
        kind = (
            "unknown-parser" if "unknown" in got["error"] and "parser" in got["error"] else "error"
        )
        return kind, got["error"].split("; valid names")[0][:160]
    calls = [(c["function"]["name"], _args(c["function"]["arguments"])) for c in got["tool_calls"]]
    want = [(c["name"], c["arguments"]) for c in expected["tool_calls"]]
    if calls != want:
        return "calls", f"got {calls!r} want {want!r}"
    for have, should in zip(got["tool_calls"], expected["tool_calls"], strict=True):
        if "id" in should and have.get("id") != should["id"]:
            return "id", f"call id: got {have.get('id')!r} want {should['id']!r}"
    for field in ("content", "reasoning_content"):
        have, should = got.get(field), expected.get(field)
        if have != should:
            ws = (have or "").strip() == (should or "").strip()
            return ("ws" if ws else field), f"{field}: got {have!r} want {should!r}"
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", default="1,3,7", help="streaming chunk sizes, comma-separated")
    ap.add_argument("--family", action="append", help="only these corpus files (repeatable)")
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--max-failures", type=int, default=400, help="failure lines to print")
    ap.add_argument(
        "--fail-on",
        choices=["none", "stream", "any"],
        default="none",
        help="exit 1 when streamed results differ from whole ones (stream) or any case fails",
    )
    opts = ap.parse_args()
    cases = load_cases(opts.corpus, set(opts.family) if opts.family else None)
    modes: list[int | None] = [None] + [int(c) for c in opts.chunks.split(",") if c.strip()]
    results = {m: run_cli(cases, m) for m in modes}
    passed = collections.Counter()
    total = collections.Counter(c["family"] for c in cases)
    kinds = collections.Counter()
    failures = []
    stream_mismatches = 0
    for i, case in enumerate(cases):
        verdicts = {m: compare(case["expected"], results[m][i]) for m in modes}
        whole = results[None][i]
        disagree = [m for m in modes[1:] if _shape(results[m][i]) != _shape(whole)]
        stream_mismatches += bool(disagree)
        for m, v in verdicts.items():
            if v is None:
                passed[(case["family"], m)] += 1
        if all(v is None for v in verdicts.values()):
            passed[(case["family"], "all")] += 1
            continue
        first = next(v for v in verdicts.values() if v is not None)
        kinds[first[0]] += 1
        modes_failed = ",".join("whole" if m is None else f"c{m}" for m, v in verdicts.items() if v)
        extra = f" [stream!=whole in c{','.join(map(str, disagree))}]" if disagree else ""
        failures.append(f"{case['id']} [{first[0]}] ({modes_failed}){extra}: {first[1]}")
    head = ["whole"] + [f"c{m}" for m in modes[1:]] + ["all"]
    width = max(len(f) for f in total) + 2
    print(f"{'family':<{width}}{'cases':>6}" + "".join(f"{h:>7}" for h in head))
    for fam in sorted(total):
        cells = [passed[(fam, m)] for m in modes] + [passed[(fam, "all")]]
        print(f"{fam:<{width}}{total[fam]:>6}" + "".join(f"{c:>7}" for c in cells))
    cells = [sum(passed[(f, m)] for f in total) for m in modes]
    cells.append(sum(passed[(f, "all")] for f in total))
    print(f"{'TOTAL':<{width}}{sum(total.values()):>6}" + "".join(f"{c:>7}" for c in cells))
    print("\nfailure kinds (first failing mode):", dict(kinds.most_common()))
    print(f"streamed != whole: {stream_mismatches} case(s)")
    print(f"\nfailures ({len(failures)}):")
    for line in failures[: opts.max_failures]:
        print(" ", line)
    if (opts.fail_on == "stream" and stream_mismatches) or (opts.fail_on == "any" and failures):
        sys.exit(1)


if __name__ == "__main__":
    main()
