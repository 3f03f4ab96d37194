"""`--prefix-cache-dir` and `--warmup-prompt` across two real server processes: the first
warms the cache with a system prompt and writes it to disk on the way down; the second
starts over the same directory without a warm-up (so its memory cache starts empty) and
serves that system prompt from the disk."""

from __future__ import annotations

import openai
import pytest
from servers import cli_server

pytestmark = pytest.mark.slow

SYSTEM = " ".join(
    f"Rule {i}: read the file before editing it and keep changes small." for i in range(30)
)


def test_a_restart_reads_the_warmed_system_prompt_from_disk(tmp_path):
    (tmp_path / "system.txt").write_text(SYSTEM)
    cache = ("--prefix-cache-dir", str(tmp_path / "cache"))
    warmup = ("--warmup-prompt", str(tmp_path / "system.txt"))
    with cli_server(*cache, *warmup, log_path=tmp_path / "first.log"):
        pass  # the warm-up ran at start-up; shutdown finishes the disk write
    files = list((tmp_path / "cache").rglob("*.safetensors"))
    assert len(files) == 1 and not list((tmp_path / "cache").rglob("*.tmp"))
    with cli_server(*cache, log_path=tmp_path / "second.log") as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=300)
        reply = client.chat.completions.create(
            model="m",
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi"}],
            max_tokens=2,
            temperature=0,
        )
    cached = reply.usage.prompt_tokens_details.cached_tokens
    assert cached >= 300 and cached < reply.usage.prompt_tokens
