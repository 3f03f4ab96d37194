"""The status view in a real browser: it polls /v1/status and shows the model, its parsers,
a generation running while one streams, and the tokens it made over the last minute."""

from __future__ import annotations

import httpx
import openai
from servers import paced_replay_server

TEXT = "Waves broke on the rocks below the lighthouse. " * 6


def _text(t, element_id: str) -> str:
    return t.page.inner_text(f"#{element_id}")


def test_status_view_follows_the_server(tab):
    with paced_replay_server(TEXT, delay=0.04) as (base, _, _), tab(base) as t:
        t.open("/status")
        assert _text(t, "s-models") == "replay"
        parsers = _text(t, "s-parsers")
        assert "reasoning parser qwen3" in parsers and "tool-call parser hermes" in parsers
        assert _text(t, "s-running") == "0" and _text(t, "s-queue") == "0"
        assert _text(t, "s-mcp") == "none configured"
        # a streaming request, from another client: the view shows it running, then its tokens
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Hi"}], stream=True
        )
        first = next(iter(stream))
        assert first.choices[0].delta.role == "assistant"
        t.page.wait_for_function("() => document.getElementById('s-running').textContent === '1'")
        for _ in stream:
            pass
        t.page.wait_for_function(
            "() => document.getElementById('s-finished').textContent === '1'"
            " && parseFloat(document.getElementById('s-rate').textContent) > 0"
        )
        status = httpx.get(f"{base}/v1/status").json()
        assert f"{status['completion_tokens']} generated tokens" in _text(t, "s-tokens")
        assert _text(t, "s-running") == "0"
        assert t.page.locator("#s-spark polyline").count() == 1
