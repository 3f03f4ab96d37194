"""A process that closes an engine and exits at once ends normally: the engine's thread
releases its MLX streams before it ends (``engine/threads.py``), so their thread-local
destructor cannot race the interpreter's exit (which aborted the process, status 134)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from tiny_vision import tiny_vlm, png_data_url
from vllm_mlx.options import RuntimeOptions
from vllm_mlx.request import ChatRequest, ImageSource, Sampling, collecting_media, media_placeholder
from vllm_mlx.runtime import build_runtime

runtime = build_runtime(str(tiny_vlm("qwen2_5_vl")), RuntimeOptions.of(), progress=False)
with collecting_media() as media:
    source = ImageSource(url=png_data_url((9, 9, 9)))
    text = media_placeholder("image", "messages.0.content.0", source)
chat = ChatRequest(
    messages=[{{"role": "user", "content": text + "What is it?"}}],
    omitted_media=media,
    sampling=Sampling(temperature=0.0),
    max_tokens=2,
)
runtime.pipeline.complete_sync(runtime.pipeline.prepare_chat(chat))
runtime.close()
"""


def test_closing_the_engine_then_exiting_ends_normally():
    script = _SCRIPT.format(tests=str(TESTS))
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "terminate called" not in done.stderr
