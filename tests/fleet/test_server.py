"""`vllm-mlx serve --models-dir` over real HTTP with the official SDKs: two tiny random-weight
models and the embedded one, loaded on first use, evicted least recently used, a stream that
waits for a load with keep-alives while another model answers, per-model parser and
template settings, aliases and the default model, the operator's load/unload routes behind
the API key, and the metrics.

The tests of this module run in order against one server (each states what it needs loaded
through the load/unload routes, so a failure does not cascade silently)."""

from __future__ import annotations

import re
import threading
import time

import anthropic
import httpx
import ollama
import openai
import pytest
from models_dir import write_models_dir
from servers import cli_server

from vllm_mlx.models.loader import load_tokenizer_only
from vllm_mlx.server.launch import ServerStartError

KEY = "sekrit"
AUTH = {"Authorization": f"Bearer {KEY}"}
PLAIN_TEMPLATE = "PROMPT:{{ messages[-1].content }}{% if add_generation_prompt %} A:{% endif %}"
CONFIG = """
default = "small"

[models.coder]
reasoning_parser = "deepseek_r1"   # auto-detection would pick qwen3 for its <think> tokens
tool_call_parser = "hermes"
temperature = 0
max_tokens = 6

[models.small]
chat_template = "plain.jinja"
temperature = 0
max_tokens = 6

[models.smollm2]
path = "default"
aliases = ["claude-3-5-haiku"]
temperature = 0
max_tokens = 3
"""


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = write_models_dir(tmp_path_factory.mktemp("fleet"), CONFIG)
    (folder / "plain.jinja").write_text(PLAIN_TEMPLATE)
    (folder / "broken").mkdir()  # a config.json and nothing else: listed, fails to load
    (folder / "broken" / "config.json").write_text('{"model_type": "llama"}')
    return folder


@pytest.fixture(scope="module")
def base(models, tmp_path_factory):
    log = tmp_path_factory.mktemp("fleet-server") / "server.log"
    args = ("--models-dir", str(models), "--max-loaded-models", "2", "--sse-keepalive", "0.2")
    with cli_server(*args, "--api-key", KEY, log_path=log) as url:
        yield url


def oai(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0, timeout=300)


def claude(base: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base, api_key=KEY, max_retries=0, timeout=300)


def listed(base: str) -> dict[str, dict]:
    return {m.id: m.model_extra for m in oai(base).models.list().data}


def ask(base: str, model: str, **extra):
    return oai(base).chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hello"}], **extra
    )


def route(base: str, model: str, action: str, headers=AUTH) -> httpx.Response:
    return httpx.post(f"{base}/v1/models/{model}/{action}", headers=headers, timeout=300)


def metric(base: str, name: str, **labels: str) -> float:
    text = httpx.get(f"{base}/metrics", headers=AUTH).text
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = rf"^{re.escape(name)}{re.escape('{' + wanted + '}') if labels else ''} (\S+)$"
    found = re.search(pattern, text, re.M)
    return float(found.group(1)) if found else 0.0


def test_every_model_is_listed_before_any_loads(base):
    models = oai(base).models.list().data
    assert [m.id for m in models] == ["small", "broken", "coder", "smollm2"]  # default first
    about = {m.id: m.model_extra for m in models}
    assert not any(info["loaded"] for info in about.values())
    assert about["coder"]["max_model_len"] == 4096  # from its config.json, unloaded
    assert about["coder"]["parsers"] == {"reasoning": "deepseek_r1", "tool_calls": "hermes"}
    assert about["smollm2"]["aliases"] == ["claude-3-5-haiku"]
    health = httpx.get(f"{base}/health").json()
    assert health["models"] == {"loaded": [], "loading": [], "adapters": {}}


def test_first_use_loads_the_model_and_responses_name_it(base):
    answer = ask(base, "coder")
    assert answer.model == "coder"
    # the per-model reasoning parser: DeepSeek-R1's output starts inside the reasoning
    assert answer.choices[0].message.model_extra["reasoning_content"]
    assert not answer.choices[0].message.content
    assert listed(base)["coder"]["loaded"] is True
    assert listed(base)["coder"]["parsers"]["reasoning"] == "deepseek_r1"
    # an id no model has goes to the default model, which reports itself
    assert ask(base, "gpt-4o").model == "small"
    assert listed(base)["small"]["loaded"] is True
    assert metric(base, "vllm_mlx_models_loaded") == 2


def test_the_models_own_template_renders_its_prompts(base, models):
    counted = claude(base).messages.count_tokens(
        model="small", messages=[{"role": "user", "content": "hello"}]
    )
    tokenizer = load_tokenizer_only(str(models / "small.gguf")).tokenizer
    expected = tokenizer.encode("PROMPT:hello A:", add_special_tokens=False)
    assert counted.input_tokens == len(expected)
    other = claude(base).messages.count_tokens(
        model="coder", messages=[{"role": "user", "content": "hello"}]
    )
    assert other.input_tokens != counted.input_tokens  # coder's Qwen3-style template


def test_a_stream_waits_for_its_load_with_keepalives_while_others_answer(base):
    assert route(base, "smollm2", "unload").status_code == 200
    assert route(base, "coder", "load").status_code == 200
    assert ask(base, "small").model == "small"  # small used last: coder is the LRU one
    lru_before = metric(base, "vllm_mlx_model_evictions_total", model="coder", reason="lru")
    lines: list[str] = []

    def stream() -> None:
        body = {
            "model": "smollm2",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
        }
        with httpx.stream(
            "POST", f"{base}/v1/chat/completions", json=body, headers=AUTH, timeout=300
        ) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if line:
                    lines.append(line)

    waiting = threading.Thread(target=stream)
    waiting.start()
    for _ in range(600):
        if httpx.get(f"{base}/health").json()["models"]["loading"] == ["smollm2"]:
            break
        time.sleep(0.05)
    health = httpx.get(f"{base}/health")
    assert health.status_code == 200 and health.json()["models"]["loading"] == ["smollm2"]
    other = ask(base, "small")  # a loaded model answers meanwhile
    # the server says so itself: the load was still going on when that answer had come
    assert httpx.get(f"{base}/health").json()["models"]["loading"] == ["smollm2"]
    waiting.join(timeout=300)
    assert other.model == "small"
    assert lines[0] == ": keep-alive"
    data = [line for line in lines if line.startswith("data: ")]
    assert data[-1] == "data: [DONE]"
    assert '"model":"smollm2"' in data[0]
    # three loaded would pass --max-loaded-models 2: the least recently used (coder) went
    assert not listed(base)["coder"]["loaded"]
    lru = metric(base, "vllm_mlx_model_evictions_total", model="coder", reason="lru")
    assert lru == lru_before + 1


def test_anthropic_streams_ping_while_the_alias_loads(base):
    assert route(base, "smollm2", "unload").json() == {
        "id": "smollm2",
        "loaded": False,
        "was_loaded": True,
    }
    body = {
        "model": "claude-3-5-haiku",
        "max_tokens": 3,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
    }
    with httpx.stream(
        "POST", f"{base}/v1/messages", json=body, headers={"x-api-key": KEY}, timeout=300
    ) as response:
        events = [line for line in response.iter_lines() if line.startswith("event: ")]
    assert events[0] == "event: ping"
    assert events.index("event: message_start") > 0 and events[-1] == "event: message_stop"
    message = claude(base).messages.create(
        model="claude-3-5-haiku", max_tokens=3, messages=[{"role": "user", "content": "hi"}]
    )
    assert message.model == "smollm2"
    with claude(base).messages.stream(
        model="claude-3-5-haiku", max_tokens=3, messages=[{"role": "user", "content": "hi"}]
    ) as streamed:
        assert streamed.get_final_message().model == "smollm2"


def test_concurrent_requests_to_two_models(base):
    assert route(base, "small", "load").status_code == 200
    answers: dict[str, str] = {}

    def one(model: str) -> None:
        answers[model] = ask(base, model).model

    threads = [threading.Thread(target=one, args=(m,)) for m in ("small", "smollm2")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert answers == {"small": "small", "smollm2": "smollm2"}


def test_load_and_unload_routes_are_the_operators(base):
    assert route(base, "coder", "load", headers={}).status_code == 401
    assert route(base, "coder", "unload", headers={}).status_code == 401
    assert route(base, "coder", "unload").status_code == 200  # whatever ran before
    loads = metric(base, "vllm_mlx_model_load_seconds_count", model="coder")
    unloads = metric(base, "vllm_mlx_model_evictions_total", model="coder", reason="operator")
    loaded = route(base, "coder", "load")
    assert loaded.status_code == 200 and loaded.json()["loaded"] is True
    assert listed(base)["coder"]["loaded"] is True
    missing = route(base, "gpt-4o", "load")  # an operator's id never means the default
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"
    assert route(base, "coder", "unload").json()["was_loaded"] is True
    assert route(base, "coder", "unload").json()["was_loaded"] is False
    after = metric(base, "vllm_mlx_model_evictions_total", model="coder", reason="operator")
    assert after == unloads + 1
    assert metric(base, "vllm_mlx_model_load_seconds_count", model="coder") == loads + 1


def loaded_models(base: str) -> set[str]:
    return {name for name, info in listed(base).items() if info["loaded"]}


def test_a_model_that_fails_to_load_answers_in_each_apis_shape(base):
    assert route(base, "small", "load").status_code == 200
    assert route(base, "smollm2", "load").status_code == 200
    before = loaded_models(base)
    assert len(before) == 2  # --max-loaded-models: a load would have to unload one
    with pytest.raises(openai.InternalServerError, match="model 'broken' failed to load"):
        ask(base, "broken")
    chunks = ask(base, "broken", stream=True)  # the stream had begun: its error event
    with pytest.raises(openai.APIError, match="model 'broken' failed to load"):
        list(chunks)
    events = list(oai(base).responses.create(model="broken", input="hi", stream=True))
    assert events[-1].type == "error" and "failed to load" in events[-1].message
    with pytest.raises(anthropic.APIStatusError, match="failed to load"):
        with claude(base).messages.stream(
            model="broken", max_tokens=3, messages=[{"role": "user", "content": "hi"}]
        ) as streamed:
            streamed.get_final_message()
    assert httpx.get(f"{base}/health").status_code == 200
    assert not listed(base)["broken"]["loaded"]
    # its files were checked first: no model was unloaded to make room for it
    assert loaded_models(base) == before


@pytest.fixture(scope="module")
def strict_base(models, tmp_path_factory):
    """MODEL (coder, also in the folder) as the default, a short TTL, strict ids."""
    log = tmp_path_factory.mktemp("fleet-strict") / "server.log"
    args = (str(models / "coder"), "--models-dir", str(models), "--model-ttl", "1")
    with cli_server(*args, "--strict-model-ids", log_path=log) as url:
        yield url


def test_ollamas_keep_alive_sets_how_long_the_model_stays_loaded(base):
    client = ollama.Client(host=base, headers=AUTH, timeout=300)

    def expiry() -> float:
        (entry,) = [m for m in client.ps().models if m.model == "coder"]
        return entry.expires_at.timestamp() - time.time()

    client.generate(model="coder", prompt="Hi", keep_alive=-1, options={"num_predict": 2})
    assert expiry() > 200 * 365 * 86400  # never
    client.chat(model="coder", messages=[{"role": "user", "content": "Hi"}], keep_alive="1h")
    assert 3500 < expiry() <= 3600
    assert client.generate(model="coder", keep_alive=0).done_reason == "unload"
    for _ in range(100):
        if "coder" not in loaded_models(base):
            break
        time.sleep(0.1)
    assert "coder" not in {m.model for m in client.ps().models}
    assert metric(base, "vllm_mlx_model_evictions_total", model="coder", reason="ttl") == 1


def test_model_is_the_default_strict_ids_404_idle_models_unload(strict_base):
    base = strict_base
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=300)
    first = client.models.list().data[0]
    assert first.id == "coder" and first.model_extra["loaded"] is True  # loaded at start
    with pytest.raises(openai.NotFoundError, match="'gpt-4o' is not served here"):
        ask(base, "gpt-4o")
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")
    assert client.models.retrieve("coder").model_extra["root"] == "coder"
    with pytest.raises(anthropic.NotFoundError) as caught:
        anthropic.Anthropic(base_url=base, api_key="x", max_retries=0).messages.create(
            model="claude-haiku-4-5", max_tokens=2, messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.body["error"]["type"] == "not_found_error"
    for _ in range(300):  # idle past --model-ttl: unloaded
        if not listed(base)["coder"]["loaded"]:
            break
        time.sleep(0.1)
    assert listed(base)["coder"]["loaded"] is False
    assert metric(base, "vllm_mlx_model_evictions_total", model="coder", reason="ttl") >= 1
    assert ask(base, "coder").model == "coder"  # loaded again on its next request


def test_a_bad_models_toml_stops_start_up_naming_model_and_field(tmp_path):
    folder = write_models_dir(tmp_path, '[models.coder]\ntool_call_parser = "hermez"\n')
    with pytest.raises(ServerStartError):
        with cli_server("--models-dir", str(folder), log_path=tmp_path / "log", timeout=120):
            pass
    log = (tmp_path / "log").read_text()
    assert "model 'coder', field 'tool_call_parser': unknown tool-call parser 'hermez'" in log
