"""Streaming-parse throughput per family: 1 MB of mixed output fed in 1-4 character chunks.

Each family's output is prose, a reasoning block and that family's own tool calls, repeated to
the target size; two more rows parse it with the reasoning parser only and with no parser (the
floor: one `MessageDelta` per feed). Timing 250 KB and 1 MB shows whether the cost grows
linearly. Each figure is the best of ``--repeat`` runs, in CPU seconds of this process (wall
time on a shared machine mostly measures the neighbours); the last column is wall s/MB. Run:
``python benchmarks/bench_parsers.py [--sizes 250000 1000000] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import random
import time

from vllm_mlx.chat.stream import make_output_stream
from vllm_mlx.families.catalog import REASONING_FORMATS, TOOL_CALL_FORMATS

NO_PARSER = "(no parser)"
REASONING_ONLY = "(qwen3 only)"
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


def chunked(text: str) -> list[str]:
    """The text in 1-4 character pieces (a fixed pseudo-random sequence)."""
    rng = random.Random(0)
    chunks, i = [], 0
    while i < len(text):
        k = rng.randint(1, 4)
        chunks.append(text[i : i + k])
        i += k
    return chunks


def parsers_for(row: str) -> tuple[str | None, str | None]:
    """(reasoning parser, tool parser) for a benchmark row."""
    if row == NO_PARSER:
        return None, None
    if row == REASONING_ONLY:
        return "qwen3", None
    return ("harmony" if row == "harmony" else "qwen3"), row


def time_stream(row: str, text: str, repeat: int) -> tuple[float, float]:
    """Best (CPU seconds, wall seconds) over ``repeat`` streamed parses of ``text``."""
    reasoning, tool = parsers_for(row)
    chunks = chunked(text)
    best_cpu = best_wall = float("inf")
    for _ in range(repeat):
        stream = make_output_stream(
            reasoning_format=REASONING_FORMATS[reasoning] if reasoning else None,
            tool_format=TOOL_CALL_FORMATS[tool] if tool else None,
            tools=TOOLS,
        )
        cpu, wall = time.process_time(), time.perf_counter()
        for chunk in chunks:
            stream.feed(chunk)
        stream.finish()
        best_cpu = min(best_cpu, time.process_time() - cpu)
        best_wall = min(best_wall, time.perf_counter() - wall)
    return best_cpu, best_wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[250_000, 1_000_000])
    parser.add_argument("--families", nargs="*", default=sorted(TOOL_CALL_FORMATS))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sizes = args.sizes
    head = "".join(f"{s // 1000:>9} KB" for s in sizes)
    print(f"{'family':<14}{head}  cpu s/MB  wall s/MB")
    for row in [*args.families, REASONING_ONLY, NO_PARSER]:
        source = "hermes" if row in (REASONING_ONLY, NO_PARSER) else row
        times = [time_stream(row, sample_output(source, s), args.repeat) for s in sizes]
        scale = sizes[-1] / 1_000_000
        cpu, wall = times[-1][0] / scale, times[-1][1] / scale
        cells = "".join(f"{t[0]:>11.3f}s" for t in times)
        print(f"{row:<14}{cells}  {cpu:8.2f}  {wall:9.2f}", flush=True)


if __name__ == "__main__":
    main()
