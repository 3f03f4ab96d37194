"""Operations through the real app over real HTTP: metrics, API keys, CORS, request ids and
the access log, per-request timeouts and SSE keep-alives.

The engine replays a fixed text (no model cost). Slowness is injected with a gate in front of
the token source: a newly inserted sequence's first step (its prefill) waits until the test
opens the gate, so "the first token is slow" is exact rather than a race against a sleep.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from contextlib import contextmanager

import anthropic
import httpx
import openai
import pytest
from mcp_servers.harness import toolbox_stdio
from prometheus_client.parser import text_string_to_metric_families
from servers import ForcingSource, cli_server, thread_server

from vllm_mlx.mcp.config import parse_config
from vllm_mlx.mcp.manager import MCPManager
from vllm_mlx.options import RuntimeOptions
from vllm_mlx.runtime import build_replay_runtime
from vllm_mlx.server.app import create_app
from vllm_mlx.server.ops.auth import OPEN_PATHS
from vllm_mlx.server.ops.middleware import RequestIdLogFilter
from vllm_mlx.server.state import ServerState

REPLY = "The lighthouse keeper climbed the stairs at dusk and lit the lamp for the ships."
ASK = [{"role": "user", "content": "Tell me something."}]
KEY = "sekrit-key-123"


class GatedSource:
    """Failure injection: the first step after a sequence is inserted waits for ``gate``."""

    def __init__(self, inner):
        self.inner = inner
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = threading.Event()  # set while a step is held at the gate
        self._fresh = False
        self.produced = 0  # tokens stepped, to see whether a generation went on

    def __getattr__(self, name):  # the engine's other questions go to the wrapped source
        return getattr(self.inner, name)

    def insert(self, *args, **kwargs):
        self._fresh = True
        return self.inner.insert(*args, **kwargs)

    def remove(self, uid):
        self.inner.remove(uid)

    def reset(self):
        self.inner.reset()

    def flush(self):
        self.inner.flush()

    @property
    def spec_counts(self):
        return self.inner.spec_counts

    def prefill_to_share(self, prompt):
        return self.inner.prefill_to_share(prompt)

    def step(self):
        if self._fresh:
            self._fresh = False
            self.waiting.set()
            self.gate.wait(timeout=60)
            self.waiting.clear()
        steps, ended = self.inner.step()
        self.produced += len(steps)
        return steps, ended


@pytest.fixture(scope="module")
def runtime():
    runtime = build_replay_runtime(REPLY)
    runtime.engine.source = GatedSource(runtime.engine.source)
    yield runtime
    runtime.engine.source.gate.set()
    runtime.close()


@pytest.fixture
def gate(runtime):
    source: GatedSource = runtime.engine.source
    yield source
    source.gate.set()


@contextmanager
def serving(runtime, **fields):
    state = ServerState(runtime.pipeline, "replay", **fields)
    app = create_app(state)
    with thread_server(app) as base:
        yield base, state, app


def scrape(base: str, headers: dict | None = None) -> dict[tuple, float]:
    """Every sample of /metrics as {(name, sorted label items): value}."""
    response = httpx.get(f"{base}/metrics", headers=headers or {})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def wait_until(condition, what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)


def sse_lines(base: str, path: str, body: dict, headers: dict | None = None) -> list[str]:
    with httpx.stream("POST", f"{base}{path}", json=body, headers=headers, timeout=60) as r:
        assert r.status_code == 200
        return [line for line in r.iter_lines() if line]


# -- metrics ---------------------------------------------------------------------------------


def test_metrics_count_requests_tokens_and_latencies(runtime):
    with serving(runtime) as (base, _, _):
        before = scrape(base)
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
        chunks = list(
            client.chat.completions.create(
                model="m", messages=ASK, stream=True, stream_options={"include_usage": True}
            )
        )
        streamed = chunks[-1].usage
        whole = client.completions.create(model="m", prompt="Once upon a time", max_tokens=5)
        bad = httpx.post(f"{base}/v1/chat/completions", json={"messages": []})
        after = scrape(base)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert bad.status_code == 400
    total = "vllm_mlx_requests_total"
    assert delta(total, route="/v1/chat/completions", status="200") == 1
    assert delta(total, route="/v1/chat/completions", status="400") == 1
    assert delta(total, route="/v1/completions", status="200") == 1
    assert delta(total, route="/metrics", status="200") == 1  # the first scrape
    assert (
        delta("vllm_mlx_prompt_tokens_total") == streamed.prompt_tokens + whole.usage.prompt_tokens
    )
    assert delta("vllm_mlx_completion_tokens_total") == (
        streamed.completion_tokens + whole.usage.completion_tokens
    )
    assert delta("vllm_mlx_generations_finished_total", finish_reason="stop") == 1
    assert delta("vllm_mlx_generations_finished_total", finish_reason="length") == 1
    # token timings come from the stream: one first token, a gap before each later token
    assert delta("vllm_mlx_time_to_first_token_seconds_count") == 1
    assert delta("vllm_mlx_inter_token_latency_seconds_count") == streamed.completion_tokens - 1
    assert delta("vllm_mlx_time_to_first_token_seconds_sum") > 0


def test_metrics_show_in_flight_and_queued_requests(runtime, gate):
    gate.gate.clear()
    with serving(runtime) as (base, _, _):
        body = {"model": "m", "messages": ASK, "max_tokens": 3}
        replies: list[httpx.Response] = []

        def send():
            replies.append(httpx.post(f"{base}/v1/chat/completions", json=body, timeout=60))

        first = threading.Thread(target=send)
        first.start()
        wait_until(gate.waiting.is_set, "the first request reaching the engine")
        second = threading.Thread(target=send)
        second.start()  # the engine is busy in a step, so this one waits in the queue

        def busy() -> bool:
            samples = scrape(base)
            return (
                value(samples, "vllm_mlx_queue_depth") == 1
                and value(samples, "vllm_mlx_requests_running") == 1
                and value(samples, "vllm_mlx_requests_in_flight") == 3  # 2 + this scrape
            )

        wait_until(busy, "one request running, one queued")
        gate.gate.set()
        first.join()
        second.join()
        samples = scrape(base)
    assert [r.status_code for r in replies] == [200, 200]
    assert value(samples, "vllm_mlx_queue_depth") == 0
    assert value(samples, "vllm_mlx_requests_running") == 0
    assert value(samples, "vllm_mlx_requests_in_flight") == 1


def test_metrics_registries_are_per_app(runtime):
    with serving(runtime) as (base_a, _, _), serving(runtime) as (base_b, _, _):
        reply = httpx.post(
            f"{base_a}/v1/chat/completions", json={"model": "m", "messages": ASK}, timeout=60
        )
        assert reply.status_code == 200
        a, b = scrape(base_a), scrape(base_b)
    assert value(a, "vllm_mlx_generations_finished_total", finish_reason="stop") == 1
    assert value(b, "vllm_mlx_generations_finished_total", finish_reason="stop") == 0
    assert ("vllm_mlx_mcp_servers_up", ()) in b and value(b, "vllm_mlx_mcp_servers_up") == 0


def test_constraint_give_up_reaches_the_metric_the_log_and_the_client(caplog):
    """A caller that forces tokens the JSON constraint rejects (the replayed text is not
    JSON): the constraint gives up; the client sees why, the counter counts each
    generation once, and the log line carries the request id."""
    runtime = build_replay_runtime("Not JSON at all, sorry.")
    vocab = len(runtime.loaded.tokenizer.get_vocab())
    runtime.engine.source = ForcingSource(runtime.engine.source, vocab)
    body = {"model": "m", "messages": ASK, "response_format": {"type": "json_object"}}
    caplog.handler.addFilter(RequestIdLogFilter())  # what `serve` installs on its handlers
    try:
        with serving(runtime) as (base, _, _), caplog.at_level(logging.WARNING):
            whole = httpx.post(
                f"{base}/v1/chat/completions",
                json=body,
                headers={"x-request-id": "give-up-1"},
                timeout=60,
            )
            lines = sse_lines(base, "/v1/chat/completions", {**body, "stream": True})
            samples = scrape(base)
    finally:
        runtime.close()
    assert whole.status_code == 200
    assert "constraint_gave_up" in whole.json() and whole.json()["constraint_gave_up"]
    finals = [json.loads(x[6:]) for x in lines if x.startswith("data: {")]
    assert [c.get("constraint_gave_up") is not None for c in finals if c["choices"]][-1]
    assert value(samples, "vllm_mlx_constraint_give_ups_total") == 2
    records = [r for r in caplog.records if "constraint gave up" in r.getMessage()]
    assert any(getattr(r, "request_id", None) == "give-up-1" for r in records)


def test_mcp_servers_up_is_the_managers_connected_count(runtime):
    config = {
        "mcpServers": {
            "toolbox": toolbox_stdio(),
            "gone": toolbox_stdio(command="/nonexistent/bin/python3"),
        }
    }
    manager = MCPManager(parse_config(config))
    with serving(runtime, mcp=manager) as (base, _, _):  # the app's lifespan connects
        samples = scrape(base)
        status = httpx.get(f"{base}/health").json()["mcp"]
    assert {name: s["state"] for name, s in status.items()}["toolbox"] == "connected"
    assert status["gone"]["state"] != "connected"
    assert value(samples, "vllm_mlx_mcp_servers_up") == 1


def test_prefix_cache_hits_counted_from_usage():
    """A real batched model with a prefix cache (tiny random weights): the second identical
    prompt is served from the cache, and the metrics count it."""
    from tiny_models import build_tiny_model, build_tiny_tokenizer

    from vllm_mlx.engine.engine import Engine
    from vllm_mlx.engine.prefix_cache import PrefixCache
    from vllm_mlx.engine.sources import ModelBatchSource
    from vllm_mlx.pipeline import Pipeline

    tokenizer = build_tiny_tokenizer()
    source = ModelBatchSource(build_tiny_model(tokenizer), prefix_cache=PrefixCache(64 * 2**20))
    engine = Engine(source, tokenizer)
    pipeline = Pipeline(engine, context_length=4096, options=RuntimeOptions.of(max_tokens=4))
    prompt = "a shared system prompt that agents send on every turn " * 8
    body = {"model": "m", "prompt": prompt, "max_tokens": 4, "temperature": 0}
    try:
        with thread_server(create_app(ServerState(pipeline, "tiny"))) as base:
            first = httpx.post(f"{base}/v1/completions", json=body, timeout=60).json()
            middle = scrape(base)
            httpx.post(f"{base}/v1/completions", json=body, timeout=60).raise_for_status()
            after = scrape(base)
    finally:
        engine.close()
    prompt_tokens = first["usage"]["prompt_tokens"]
    assert value(middle, "vllm_mlx_prefix_cache_hits_total") == 0
    assert value(after, "vllm_mlx_prefix_cache_hits_total") == 1
    assert value(after, "vllm_mlx_prefix_cache_hit_tokens_total") == prompt_tokens - 1


# -- API key ---------------------------------------------------------------------------------

BODIES = {
    "/v1/chat/completions": {"model": "m", "messages": ASK, "max_tokens": 3},
    "/v1/completions": {"model": "m", "prompt": "Hi", "max_tokens": 3},
    "/v1/messages": {"model": "m", "messages": ASK, "max_tokens": 3},
    "/v1/messages/count_tokens": {"model": "m", "messages": ASK},
    "/v1/responses": {"model": "m", "input": "Hi", "max_output_tokens": 3},
}


def protected_routes(app) -> list[tuple[str, str]]:
    """(method, concrete path) of every route but the open ones (/health, the UI pages), read
    from the app itself so a route added later is covered too."""
    out = []
    for route in app.routes:
        path = route.path.replace("{response_id}", "resp_unknown")
        path = path.replace("{model_id:path}", "any-model")
        path = path.replace("{name:path}", "any-adapter")
        assert "{" not in path, f"give {route.path} a concrete value here"
        for method in sorted(route.methods - {"HEAD"}):
            if route.path not in OPEN_PATHS:
                out.append((method, path))
    return out


def assert_401_in_shape(response: httpx.Response, path: str) -> None:
    assert response.status_code == 401, (path, response.status_code, response.text)
    body = response.json()
    if path.startswith("/v1/messages"):
        assert body["type"] == "error" and body["error"]["type"] == "authentication_error"
    elif path.startswith("/api/"):  # Ollama's shape: the message is the error
        assert isinstance(body["error"], str) and "key" in body["error"].lower()
    else:
        assert body["error"]["type"] == "authentication_error" and body["error"]["message"]


def test_every_route_but_health_requires_the_key(runtime):
    # one client for every request: httpx.request builds a TLS context per call
    with serving(runtime, api_key=KEY) as (base, _, app), httpx.Client(base_url=base) as client:
        routes = protected_routes(app)
        assert ("GET", "/metrics") in routes and ("POST", "/v1/chat/completions") in routes
        wrong = [
            {},
            {"Authorization": "Bearer nope"},
            {"x-api-key": "nope"},
            {"Authorization": f"Basic {KEY}"},
            {"Authorization": f"Bearer {KEY}x"},
        ]
        right = [
            {"Authorization": f"Bearer {KEY}"},
            {"x-api-key": KEY},
            {"authorization": f"bearer {KEY}"},
        ]
        for method, path in routes:
            body = BODIES.get(path, {})
            for headers in wrong:
                r = client.request(method, path, json=body, headers=headers)
                assert_401_in_shape(r, path)
            for headers in right:
                r = client.request(method, path, json=body, headers=headers, timeout=60)
                assert r.status_code != 401, (method, path, headers)
                if path in BODIES or path in ("/v1/models", "/metrics"):
                    assert r.status_code == 200, (method, path, r.text)
        assert httpx.get(f"{base}/health").status_code == 200


def test_sdks_authenticate_with_their_own_header_styles(runtime):
    with serving(runtime, api_key=KEY) as (base, _, _):
        good = openai.OpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0)
        assert good.chat.completions.create(model="m", messages=ASK, max_tokens=3).choices
        bad = openai.OpenAI(base_url=f"{base}/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
        claude = anthropic.Anthropic(base_url=base, api_key=KEY, max_retries=0)
        assert claude.messages.create(model="m", messages=ASK, max_tokens=3).content
        with pytest.raises(anthropic.AuthenticationError):
            anthropic.Anthropic(base_url=base, api_key="wrong", max_retries=0).messages.create(
                model="m", messages=ASK, max_tokens=3
            )


# -- CORS --------------------------------------------------------------------------------------

GOOD, EVIL = "http://good.example", "http://evil.example"


def test_cors_headers_only_for_allowed_origins(runtime):
    with serving(runtime, allowed_origins=[GOOD], api_key=KEY) as (base, _, _):
        preflight = httpx.options(
            f"{base}/v1/chat/completions",
            headers={
                "Origin": GOOD,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type",
            },
        )
        assert preflight.status_code == 200  # no key needed for a preflight
        assert preflight.headers["access-control-allow-origin"] == GOOD
        assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
        auth = {"Authorization": f"Bearer {KEY}"}
        allowed = httpx.get(f"{base}/v1/models", headers={"Origin": GOOD, **auth})
        assert allowed.headers["access-control-allow-origin"] == GOOD
        assert "x-request-id" in allowed.headers["access-control-expose-headers"].lower()
        refused = httpx.get(f"{base}/v1/models", headers={"Origin": EVIL, **auth})
        assert refused.status_code == 200
        assert "access-control-allow-origin" not in refused.headers
        evil_preflight = httpx.options(
            f"{base}/v1/models", headers={"Origin": EVIL, "Access-Control-Request-Method": "GET"}
        )
        assert "access-control-allow-origin" not in evil_preflight.headers
        # a rejected key still carries CORS headers, so the page can read the error
        unauthorized = httpx.get(f"{base}/v1/models", headers={"Origin": GOOD})
        assert unauthorized.status_code == 401
        assert unauthorized.headers["access-control-allow-origin"] == GOOD
    with serving(runtime) as (base, _, _):
        default = httpx.get(f"{base}/v1/models", headers={"Origin": GOOD})
        assert not [h for h in default.headers if h.startswith("access-control-")]


# -- request ids and the access log --------------------------------------------------------------


def test_request_id_header_and_access_log(runtime, caplog):
    caplog.set_level(logging.INFO, logger="vllm_mlx.access")
    with serving(runtime) as (base, _, _):
        generated = httpx.get(f"{base}/v1/models")
        echoed = httpx.post(
            f"{base}/v1/completions",
            headers={"x-request-id": "client-id.42"},
            json={"model": "m", "prompt": "Hi", "max_tokens": 2},
        )
        unsafe = httpx.get(f"{base}/v1/models", headers={"x-request-id": "a b\tc" + "x" * 200})
        missing = httpx.get(f"{base}/v1/nothing")
    ids = [r.headers["x-request-id"] for r in (generated, echoed, unsafe, missing)]
    assert re.fullmatch(r"[0-9a-f]{32}", ids[0]), ids[0]
    assert ids[1] == "client-id.42"
    assert len(ids[2]) == 32 and ids[2] != ids[0]
    lines = [r for r in caplog.records if r.name == "vllm_mlx.access"]
    by_id = {r.request_id: r for r in lines}
    assert by_id["client-id.42"].method == "POST"
    assert by_id["client-id.42"].path == "/v1/completions"
    assert by_id["client-id.42"].status == 200
    assert by_id["client-id.42"].duration_ms > 0  # measured, not a placeholder zero
    assert "request_id=client-id.42" in by_id["client-id.42"].getMessage()
    assert by_id[ids[3]].status == 404


# -- timeouts ------------------------------------------------------------------------------------


def test_timeout_ends_a_stream_with_error_terminal_chunk_and_done(runtime, gate):
    gate.gate.clear()  # the first token never comes before the deadline
    with serving(runtime, timeout=0.5) as (base, state, _):
        body = {"model": "m", "messages": ASK, "stream": True}
        lines = sse_lines(base, "/v1/chat/completions", body)
        frames = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
        assert lines[-1] == "data: [DONE]"
        error = next(f for f in frames if "error" in f)["error"]
        assert error["code"] == "timeout" and "timed out" in error["message"]
        assert frames[-1]["choices"][0]["finish_reason"] == "error"
        gate.gate.set()
        # the generation was cancelled, not left running
        wait_until(
            lambda: httpx.get(f"{base}/health").json()["running"] == 0,
            "the timed-out generation leaving the engine",
        )
        after = scrape(base)
        assert value(after, "vllm_mlx_generations_finished_total", finish_reason="stop") == 0


def test_timeout_answers_non_stream_requests_in_each_api_shape(runtime, gate):
    gate.gate.clear()
    with serving(runtime, timeout=0.5) as (base, _, _):
        chat = httpx.post(
            f"{base}/v1/chat/completions", timeout=60, json={"model": "m", "messages": ASK}
        )
        assert chat.status_code == 504
        assert chat.json()["error"]["code"] == "timeout"
        gate.gate.clear()
        messages = httpx.post(
            f"{base}/v1/messages", timeout=60, json={"model": "m", "messages": ASK, "max_tokens": 5}
        )
        assert messages.status_code == 504
        assert messages.json()["type"] == "error"
        assert "timed out" in messages.json()["error"]["message"]
        gate.gate.set()
        # with the gate open the same request fits in its time
        ok = httpx.post(
            f"{base}/v1/chat/completions",
            timeout=60,
            json={"model": "m", "messages": ASK, "max_tokens": 3},
        )
        assert ok.status_code == 200


# -- keep-alive ----------------------------------------------------------------------------------


def test_keepalive_comments_while_the_first_token_is_awaited(runtime, gate):
    gate.gate.clear()
    with serving(runtime, sse_keepalive=0.05) as (base, _, _):
        body = {"model": "m", "messages": ASK, "stream": True, "max_tokens": 4}
        with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=60) as r:
            lines = (line for line in r.iter_lines() if line)
            seen = []
            while seen.count(": keep-alive") < 3:
                seen.append(next(lines))
            gate.gate.set()
            seen.extend(lines)
    data = [line for line in seen if line.startswith("data: {")]
    first_content = next(
        i
        for i, line in enumerate(seen)
        if line.startswith("data: {") and '"content":"' in line and '"content":""' not in line
    )
    assert seen.index(": keep-alive") < first_content
    assert seen[-1] == "data: [DONE]"
    assert json.loads(data[-1][6:])["choices"][0]["finish_reason"] == "length"


def test_client_leaving_during_keepalives_cancels_the_generation(runtime, gate):
    gate.gate.clear()
    with serving(runtime, sse_keepalive=0.05) as (base, _, _):
        body = {"model": "m", "messages": ASK, "stream": True, "max_tokens": 50}
        with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=60) as r:
            lines = (line for line in r.iter_lines() if line)
            while next(lines) != ": keep-alive":
                pass
        # the client is gone; once the server has noticed (the stream's handler ended: only
        # the scrape itself is in flight) and the engine can step again, it drops the request
        wait_until(
            lambda: value(scrape(base), "vllm_mlx_requests_in_flight") <= 1,
            "the server noticing the disconnect",
        )
        produced = gate.produced
        gate.gate.set()
        wait_until(
            lambda: httpx.get(f"{base}/health").json()["running"] == 0,
            "the abandoned generation leaving the engine",
        )
        samples = scrape(base)
    assert gate.produced - produced <= 1  # the step held at the gate, then nothing more
    assert len(runtime.engine.source.inner.token_ids) > 10  # (it would have gone on)
    assert value(samples, "vllm_mlx_completion_tokens_total") == 0


def test_keepalive_comments_do_not_disturb_the_sdk(runtime, gate):
    gate.gate.clear()
    with serving(runtime, sse_keepalive=0.02) as (base, _, _):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
        stream = client.completions.create(model="m", prompt="Hi", max_tokens=4, stream=True)
        wait_until(gate.waiting.is_set, "the request reaching the engine")
        time.sleep(0.2)  # let several keep-alives go out before the first token
        gate.gate.set()
        text = "".join(c.choices[0].text for c in stream)
    assert REPLY.startswith(text) and text


# -- the CLI wires it all ------------------------------------------------------------------------


def test_serve_cli_options_env_key_cors_and_logged_request_ids(tmp_path, monkeypatch):
    replay = tmp_path / "replay.txt"
    replay.write_text(REPLY)
    log = tmp_path / "server.log"
    monkeypatch.setenv("VLLM_MLX_API_KEY", KEY)
    origins = f"{GOOD},http://other.example"
    with cli_server("--replay", str(replay), "--allowed-origins", origins, log_path=log) as base:
        assert httpx.get(f"{base}/v1/models").status_code == 401
        ok = httpx.get(
            f"{base}/v1/models",
            headers={"x-api-key": KEY, "Origin": GOOD, "x-request-id": "trace-me-1"},
        )
        evil = httpx.get(f"{base}/v1/models", headers={"x-api-key": KEY, "Origin": EVIL})
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == GOOD
    assert "access-control-allow-origin" not in evil.headers
    text = log.read_text()
    line = next(line for line in text.splitlines() if "request_id=trace-me-1" in line)
    assert "[trace-me-1]" in line and "path=/v1/models" in line and "status=200" in line
