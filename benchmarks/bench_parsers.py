"""Streaming-parse throughput per family: 1 MB of mixed output fed in 1-4 character chunks.

Each family's output is prose, a reasoning block and that family's own tool calls, repeated to
the target size. Timing 250 KB and 1 MB shows whether the cost grows linearly. Run:
``python benchmarks/bench_parsers.py [--sizes 250000 1000000]``.
"""

from __future__ import annotations

import argparse
import random
import time

from vllm_mlx.chat.formats import TOOL_CALL_FORMATS
from vllm_mlx.chat.stream import make_output_stream

PROSE = "The quick brown fox jumps over the lazy dog; numbers 12, 3.5 and {braces}. "
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            },
        },
    }
]


def sample_output(family: str, size: int) -> str:
    fmt = TOOL_CALL_FORMATS[family]
    call = fmt.render_calls([("get_weather", {"city": "Paris " * 20, "days": 3})])
    unit = PROSE * 4 + call + "\n"
    body = unit * (size // len(unit) + 1)
    return ("<think>" + PROSE * 20 + "</think>\n" + body)[:size]


def time_stream(family: str, text: str) -> float:
    rng = random.Random(0)
    chunks, i = [], 0
    while i < len(text):
        k = rng.randint(1, 4)
        chunks.append(text[i : i + k])
        i += k
    reasoning = "harmony" if family == "harmony" else "qwen3"
    stream = make_output_stream(reasoning_parser=reasoning, tool_parser=family, tools=TOOLS)
    start = time.perf_counter()
    for chunk in chunks:
        stream.feed(chunk)
    stream.finish()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[250_000, 1_000_000])
    parser.add_argument("--families", nargs="*", default=sorted(TOOL_CALL_FORMATS))
    args = parser.parse_args()
    print(f"{'family':<14}" + "".join(f"{s // 1000:>9} KB" for s in args.sizes) + "   s/MB")
    for family in args.families:
        times = [time_stream(family, sample_output(family, s)) for s in args.sizes]
        per_mb = times[-1] / (args.sizes[-1] / 1_000_000)
        print(f"{family:<14}" + "".join(f"{t:>11.3f}s" for t in times) + f"  {per_mb:6.2f}")


if __name__ == "__main__":
    main()
