"""`vllm-mlx bench --plot`: a real run against an in-process replay server writes one PNG
with the three panels, and without matplotlib the command says what to install before
benchmarking anything."""

from __future__ import annotations

import struct
import sys

import pytest
from click.testing import CliRunner
from servers import thread_server

from vllm_mlx.bench import bench
from vllm_mlx.runtime import build_replay_runtime
from vllm_mlx.server.app import create_app
from vllm_mlx.server.state import ServerState

REPLY = "The keeper climbed the stairs at dusk, lit the lamp, and watched the sea. " * 3
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the IHDR chunk, which must come first in a valid PNG."""
    assert data[:8] == PNG_MAGIC
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    return struct.unpack(">II", data[16:24])


def test_bench_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib", reason="bench --plot needs matplotlib (the 'plot' extra)")
    import matplotlib.image

    runtime = build_replay_runtime(REPLY)
    plot = tmp_path / "bench.png"
    try:
        with thread_server(create_app(ServerState(runtime.pipeline, "replay"))) as base:
            result = CliRunner().invoke(
                bench,
                ["--url", base, "--concurrency", "1,2,4", "--requests", "4"]
                + ["--prompt-tokens", "8", "--output-tokens", "6", "--no-progress"]
                + ["--plot", str(plot)],
            )
    finally:
        runtime.close()
    assert result.exit_code == 0, result.output
    data = plot.read_bytes()
    assert png_size(data) == (1300, 400)  # figsize 13 x 4 inches at 100 dpi
    pixels = matplotlib.image.imread(plot)
    assert pixels.shape[:2] == (400, 1300)
    # something was drawn: far from a blank canvas
    assert (pixels[..., :3] < 0.5).mean() > 0.005


def test_bench_plot_without_matplotlib_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    result = CliRunner().invoke(
        bench, ["--url", "http://127.0.0.1:9", "--plot", str(tmp_path / "x.png"), "--no-progress"]
    )
    assert result.exit_code != 0
    assert "pip install 'vllm-mlx[plot]'" in result.output
    assert not (tmp_path / "x.png").exists()
