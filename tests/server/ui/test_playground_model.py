"""The playground in a real browser against `vllm-mlx serve` on the embedded default model
(SmolLM2-135M): a real reply streams in with its token counts and speed, and the follow-up
turn reads the conversation's prefix from the server's cache."""

from __future__ import annotations

import re

import httpx
import pytest

pytestmark = pytest.mark.slow


def test_a_real_model_replies_in_the_playground(tab, real_server):
    with tab(real_server) as t:
        t.open()
        assert t.page.locator("#model option").all_inner_texts() == ["smollm2"]
        t.page.fill("#max_tokens", "12")
        t.page.fill("#temperature", "0")
        t.ask("Name a colour.")
        t.wait_done(timeout=300_000)
        first = t.last_reply()
        assert first.locator('[data-part="content"]').inner_text().strip()
        assert first.locator('[data-part="error"]').inner_text() == ""
        stats = first.locator('[data-part="stats"]').inner_text()
        match = re.search(r"(\d+) completion tokens · ([\d.]+) tok/s", stats)
        assert match, stats
        assert 0 < int(match[1]) <= 12 and float(match[2]) > 0
        hits_before = _cache_hits(real_server)
        t.ask("And another?")
        t.wait_done(timeout=300_000)
        second = t.last_reply().locator('[data-part="stats"]').inner_text()
        # the earlier turn's prompt is a prefix of this one: served from the prefix cache
        match = re.search(r"(\d+) prompt \((\d+) cached\)", second)
        assert match, second
        prompt, cached = int(match[1]), int(match[2])
        assert 0 < cached < prompt, second
        # the page shows the server's own count for this request
        assert _cache_hits(real_server) - hits_before == cached


def _cache_hits(base: str) -> int:
    return httpx.get(f"{base}/v1/status", timeout=30).json()["prefix_cache"]["hit_tokens"]
