"""`vllm-mlx bench` against real servers: an in-process replay server (fast; its output is a
fixed text, so token counts are known) and one the command starts itself."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from click.testing import CliRunner
from servers import thread_server

from vllm_mlx.bench import bench, percentile
from vllm_mlx.runtime import build_replay_runtime
from vllm_mlx.server.app import create_app
from vllm_mlx.server.state import ServerState

REPLY = "The keeper climbed the stairs at dusk, lit the lamp, and watched the sea. " * 4


class PeakConcurrency:
    """Counts completion requests inside the app at once. Each one after the first ``after``
    (those the bench sends one at a time) waits (up to a bound) until ``expect`` are inside,
    so a bench that really overlaps its requests is seen doing so, while a sequential one
    would show a peak of 1."""

    def __init__(self, app, expect: int, after: int = 0):
        self.app, self.expect, self.after = app, expect, after
        self.inside = self.peak = self.arrived = 0
        self.full: asyncio.Event | None = None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != "/v1/completions":
            return await self.app(scope, receive, send)
        self.full = self.full or asyncio.Event()
        self.inside += 1
        self.arrived += 1
        self.peak = max(self.peak, self.inside)
        if self.inside >= self.expect:
            self.full.set()
        try:
            if self.arrived <= self.after:
                return await self.app(scope, receive, send)
            try:
                await asyncio.wait_for(self.full.wait(), timeout=10)
            except TimeoutError:
                pass
            await self.app(scope, receive, send)
        finally:
            self.inside -= 1


@pytest.fixture(scope="module")
def runtime():
    runtime = build_replay_runtime(REPLY)
    yield runtime
    runtime.close()


def test_percentile_interpolates():
    assert percentile([], 50) is None
    assert percentile([3.0], 95) == 3.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 95) == pytest.approx(4.8)


def test_bench_against_a_running_server(runtime, tmp_path):
    state = ServerState(runtime.pipeline, "replay")
    # the warm-up and the three one-at-a-time requests pass; the level-3 ones are held
    app = PeakConcurrency(create_app(state), expect=3, after=4)
    out = tmp_path / "figures.json"
    with thread_server(app) as base:
        result = CliRunner().invoke(
            bench,
            [
                "--url",
                base,
                "--concurrency",
                "1,3",
                "--requests",
                "3",
                "--prompt-tokens",
                "12",
                "--output-tokens",
                "6",
                "--json",
                str(out),
                "--no-progress",
            ],
        )
    assert result.exit_code == 0, result.output
    assert app.peak == 3  # the level-3 requests really ran together
    figures = json.loads(out.read_text())
    assert figures["model"] == "replay"
    levels = {level["concurrency"]: level for level in figures["levels"]}
    assert sorted(levels) == [1, 3]
    for level in levels.values():
        assert level["requests"] == 3 and level["errors"] == 0
        # counted from the usage chunks: the replay is longer than 6 tokens
        assert level["output_tokens"] == 18 and level["mean_output_tokens"] == 6
        assert level["mean_prompt_tokens"] == 12
        assert level["tokens_per_s"] > 0
        assert level["ttft_p50_ms"] <= level["ttft_p95_ms"]
        assert level["itl_p50_ms"] <= level["itl_p95_ms"]
    header = result.output.splitlines()[0].split()
    assert header[:2] == ["conc", "reqs"] and "TTFT" in header
    rows = [line.split() for line in result.output.splitlines()[1:3]]
    assert [row[0] for row in rows] == ["1", "3"]


def test_bench_reports_failed_requests(runtime, tmp_path):
    state = ServerState(runtime.pipeline, "replay", api_key="right")
    out = tmp_path / "figures.json"
    with thread_server(create_app(state)) as base:
        wrong = CliRunner().invoke(bench, ["--url", base, "--api-key", "wrong", "--no-progress"])
        assert wrong.exit_code != 0 and "401" in wrong.output
        right = CliRunner().invoke(
            bench,
            [
                "--url",
                base,
                "--api-key",
                "right",
                "--concurrency",
                "2",
                "--requests",
                "2",
                "--output-tokens",
                "3",
                "--prompt-tokens",
                "4",
                "--no-progress",
                "--no-warmup",
                "--json",
                str(out),
            ],
        )
    assert right.exit_code == 0, right.output
    assert json.loads(out.read_text())["levels"][0]["errors"] == 0


def test_bench_starts_its_own_server(tmp_path):
    replay = tmp_path / "replay.txt"
    replay.write_text(REPLY)
    out = tmp_path / "figures.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "vllm_mlx",
            "bench",
            "--serve-args",
            f"--replay {replay}",
            "--concurrency",
            "2",
            "--requests",
            "2",
            "--prompt-tokens",
            "5",
            "--output-tokens",
            "4",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "concurrency 2" in proc.stderr  # the progress bar
    level = json.loads(out.read_text())["levels"][0]
    assert level["concurrency"] == 2 and level["errors"] == 0 and level["output_tokens"] == 8


@pytest.mark.slow
def test_bench_raw_ratio_on_the_default_model(tmp_path):
    """Starts the real default model and times raw mlx-lm beside it (minutes on a CPU)."""
    out = tmp_path / "figures.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "vllm_mlx",
            "bench",
            "--raw",
            "--concurrency",
            "1",
            "--requests",
            "2",
            "--prompt-tokens",
            "16",
            "--output-tokens",
            "8",
            "--json",
            str(out),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    level = figures["levels"][0]
    assert level["output_tokens"] == 16  # EOS banned: every request runs to its length
    raw = figures["raw"]
    assert raw["tok_s"] > 0 and raw["server_tok_s"] > 0
    assert raw["ratio"] == pytest.approx(raw["server_tok_s"] / raw["tok_s"], rel=0.01)
