"""The UI's routes over real HTTP (no browser): who gets the page and who the JSON root, the
pages' security headers, /v1/status against /metrics, and the last-minute token rate."""

from __future__ import annotations

import re
import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from servers import paced_replay_server

from vllm_mlx.server.ops.metrics import ServerMetrics
from vllm_mlx.server.ui.status import TokenRate, completion_rate, metric_total, tokens_generated

HTML = {"accept": "text/html,application/xhtml+xml,*/*;q=0.8"}


@pytest.fixture(scope="module")
def served():
    with paced_replay_server("Hello there, sailor.") as (base, _, state):
        yield base, state


def test_browsers_get_the_page_and_clients_the_json_root(served):
    base, _ = served
    page = httpx.get(f"{base}/", headers=HTML)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<textarea id="prompt"' in page.text and 'data-auth="open"' in page.text
    probe = httpx.get(f"{base}/")
    assert probe.status_code == 200 and probe.json() == {"status": "ok", "model": "replay"}
    assert httpx.head(f"{base}/", headers=HTML).status_code == 200
    status = httpx.get(f"{base}/status")
    assert status.status_code == 200 and 'id="s-rate"' in status.text


def test_pages_are_self_contained_under_a_strict_csp(served):
    base, _ = served
    for path in ("/", "/status"):
        response = httpx.get(f"{base}{path}", headers=HTML)
        csp = response.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "connect-src 'self'" in csp
        # one inline script and one stylesheet, each allowed by its hash, nothing by URL
        assert re.search(r"script-src 'sha256-[A-Za-z0-9+/=]+'(;|$)", csp), csp
        assert re.search(r"style-src 'sha256-[A-Za-z0-9+/=]+'(;|$)", csp), csp
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", response.text)
        assert response.text.count("<script>") == 1 and "<script src" not in response.text
        assert response.headers["x-content-type-options"] == "nosniff"


def test_pages_load_without_the_key_but_status_data_needs_it():
    with paced_replay_server("Hi.", api_key="k-1") as (base, _, _):
        assert 'data-auth="required"' in httpx.get(f"{base}/", headers=HTML).text
        assert httpx.get(f"{base}/status").status_code == 200
        assert httpx.get(f"{base}/v1/status").status_code == 401
        ok = httpx.get(f"{base}/v1/status", headers={"authorization": "Bearer k-1"})
        assert ok.status_code == 200 and ok.json()["api_key_required"] is True


def _scrape(base: str) -> dict[str, float]:
    samples = {}
    for family in text_string_to_metric_families(httpx.get(f"{base}/metrics").text):
        for sample in family.samples:
            samples[sample.name] = samples.get(sample.name, 0.0) + sample.value
    return samples


def test_status_reports_what_metrics_counts(served):
    base, state = served
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
    ask = [{"role": "user", "content": "Hi"}]
    client.chat.completions.create(model="m", messages=ask, max_tokens=4)
    list(client.chat.completions.create(model="m", messages=ask, max_tokens=4, stream=True))
    status = httpx.get(f"{base}/v1/status").json()
    metrics = _scrape(base)
    assert status["models"] == [{"id": "replay", "max_model_len": state.pipeline.context_length}]
    assert status["parsers"] == {
        "reasoning": "qwen3",
        "tool_calls": "hermes",
        "structured_output": "auto",
    }
    assert status["completion_tokens"] == metrics["vllm_mlx_completion_tokens_total"] > 0
    assert status["prompt_tokens"] == metrics["vllm_mlx_prompt_tokens_total"]
    assert status["generations_finished"] == metrics["vllm_mlx_generations_finished_total"]
    hits = metrics["vllm_mlx_prefix_cache_hit_tokens_total"]  # (a replay caches nothing)
    assert status["prefix_cache"]["hit_tokens"] == hits
    rate = round(hits / metrics["vllm_mlx_prompt_tokens_total"], 4)
    assert status["prefix_cache"]["token_hit_rate"] == rate
    assert status["queue_depth"] == 0 and status["running"] == 0
    assert status["ttft_mean_ms"] > 0 and status["itl_mean_ms"] > 0  # the streamed one
    assert status["mcp"] is None


def test_token_rate_covers_the_last_minute():
    metrics = ServerMetrics()
    now = [100.0]
    rate = TokenRate(
        lambda: metric_total(metrics.completion_tokens, "_total"), clock=lambda: now[0]
    )
    assert rate.sample() == {"tokens_per_s": 0.0, "window_s": 0.0}
    for _ in range(90):  # 10 tokens a second for 90 s, sampled every second
        now[0] += 1
        metrics.completion_tokens.inc(10)
        rate.sample()
    assert rate.sample() == {"tokens_per_s": 10.0, "window_s": 60.0}
    now[0] += 30  # then 30 s idle: half of the last minute saw 10 tok/s
    assert rate.sample() == {"tokens_per_s": 5.0, "window_s": 60.0}


def test_token_rate_starts_from_the_counter_creation():
    metrics = ServerMetrics()
    now = [1000.0]
    read = lambda: metric_total(metrics.completion_tokens, "_total")  # noqa: E731
    rate = TokenRate(read, since=990.0, clock=lambda: now[0])
    metrics.completion_tokens.inc(50)  # before anyone looked
    assert rate.sample() == {"tokens_per_s": 5.0, "window_s": 10.0}
    real = completion_rate(metrics)  # seeded from the counter's _created sample
    assert real.samples[0][1] == 0.0 and real.samples[0][0] <= time.monotonic()


def test_streamed_tokens_count_before_their_request_ends():
    metrics = ServerMetrics()
    metrics.ttft.observe(0.2)
    for _ in range(4):
        metrics.itl.observe(0.05)
    assert tokens_generated(metrics) == 5  # a stream five tokens in, its usage not yet counted
    metrics.completion_tokens.inc(5)  # it ends
    assert tokens_generated(metrics) == 5
    metrics.completion_tokens.inc(7)  # a non-streamed request of 7 tokens
    assert tokens_generated(metrics) == 12
