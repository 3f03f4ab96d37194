"""What a custom tool's grammar costs a request on the embedded model's vocabulary, with
Codex's own ``apply_patch`` Lark grammar (openai/codex, core/src/tools/handlers/apply_patch.lark):
the compile every request runs (cold, then from the per-tokenizer cache) and the check of a
finished input under ``tool_choice: auto`` (a patch of about 1.9 KB).

    LD_PRELOAD=.../libopenblas.so.0 python benchmarks/bench_custom_tools.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from vllm_mlx.constrained import text_mismatch
from vllm_mlx.constrained.custom_tools import CustomTool, check_grammars
from vllm_mlx.models.loader import load_tokenizer_only

# the same file the tests use
APPLY_PATCH = (Path(__file__).parents[1] / "tests" / "constrained" / "apply_patch.lark").read_text()
PATCH = (
    "*** Begin Patch\n*** Update File: src/app.py\n@@ def main():\n"
    + "".join(
        f"-    old_line_{i} = compute({i})\n+    new_line_{i} = compute({i}, fast=True)\n"
        for i in range(25)
    )
    + "*** End Patch\n"
)


def ms(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"p50 {statistics.median(ordered) * 1000:.2f} / p95 {p95 * 1000:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    tokenizer = load_tokenizer_only(None).tokenizer
    tool = CustomTool("apply_patch", "lark", APPLY_PATCH, "tools.0.format.definition")
    start = time.perf_counter()
    check_grammars(tokenizer, [tool])
    print(f"compile, cold (incl. tokenizer data): {(time.perf_counter() - start) * 1000:.0f} ms")
    cached, checks = [], []
    for _ in range(args.rounds):
        start = time.perf_counter()
        check_grammars(tokenizer, [tool])
        cached.append(time.perf_counter() - start)
        start = time.perf_counter()
        assert tool.grammar is not None and text_mismatch(tokenizer, tool.grammar, PATCH) is None
        checks.append(time.perf_counter() - start)
    print(f"compile, cached: {ms(cached)}")
    print(f"check of a {len(PATCH)}-character patch: {ms(checks)}")


if __name__ == "__main__":
    main()
