"""The Ollama API through real HTTP with the official ``ollama`` client: the real default
model for answers, counters, formats and model listings; the replay runtime for controlled
tool-call and reasoning output and a fault injected mid-stream; the echo runtime for what
the template is given; hostile bodies refused in Ollama's error shape."""

from __future__ import annotations

import json
from contextlib import contextmanager

import httpx
import ollama
import pytest
from servers import echo_server, replay_server, thread_server
from shared import FRANCE, WEATHER_CHAT

from vllm_mlx.runtime import build_replay_runtime
from vllm_mlx.server.app import create_app
from vllm_mlx.server.state import ServerState

TOOL_REPLY = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>'
)
GREEDY = {"temperature": 0, "num_predict": 12}

slow = pytest.mark.slow  # the real default model


@pytest.fixture(scope="module")
def client(real_server):
    return ollama.Client(host=real_server, timeout=300)


@contextmanager
def replay_client(text: str, **parsers):
    with replay_server(text, **parsers) as (base, _):
        yield ollama.Client(host=base, timeout=60), base


def chat_both(client, **kwargs):
    whole = client.chat(**kwargs)
    pieces = list(client.chat(stream=True, **kwargs))
    return whole, pieces


def joined(pieces, field):
    return "".join(getattr(p.message, field) or "" for p in pieces)


# -- the real default model --------------------------------------------------------------


@slow
def test_chat_streamed_equals_whole_with_ollama_counters(client):
    whole, pieces = chat_both(client, model="smollm2", messages=FRANCE, options=GREEDY)
    assert "Paris" in whole.message.content and whole.message.role == "assistant"
    assert joined(pieces, "content") == whole.message.content
    assert [p.done for p in pieces] == [False] * (len(pieces) - 1) + [True]
    for reply in (whole, pieces[-1]):
        assert reply.model == "smollm2" and reply.done_reason in ("stop", "length")
        assert reply.prompt_eval_count > 5 and 0 < reply.eval_count <= 12
        assert reply.total_duration >= reply.prompt_eval_duration + reply.eval_duration > 0
        assert reply.load_duration >= 0


@slow
def test_num_predict_stops_at_its_length(client):
    reply = client.chat(model="smollm2", messages=FRANCE, options={"num_predict": 3, "seed": 1})
    assert (reply.done_reason, reply.eval_count) == ("length", 3)


@slow
def test_generate_through_the_template_raw_and_streamed(client):
    whole = client.generate(
        model="smollm2", prompt="What is the capital of France?", options=GREEDY
    )
    assert "Paris" in whole.response and whole.done and whole.eval_count > 0
    pieces = list(
        client.generate(
            model="smollm2", prompt="What is the capital of France?", options=GREEDY, stream=True
        )
    )
    assert "".join(p.response for p in pieces) == whole.response
    raw = client.generate(
        model="smollm2", prompt="1, 2, 3,", raw=True, options={"temperature": 0, "num_predict": 4}
    )
    assert raw.done_reason == "length" and raw.prompt_eval_count < whole.prompt_eval_count


@slow
def test_format_schema_is_enforced_token_by_token(client):
    schema = {
        "type": "object",
        "properties": {"capital": {"type": "string", "maxLength": 12}},
        "required": ["capital"],
        "additionalProperties": False,
    }
    reply = client.chat(
        model="smollm2",
        messages=FRANCE,
        format=schema,
        options={"temperature": 0, "num_predict": 40},
    )
    assert reply.done_reason == "stop"
    assert set(json.loads(reply.message.content)) == {"capital"}
    loose = client.generate(
        model="smollm2",
        prompt="A JSON object about Paris:",
        format="json",
        options={"num_predict": 6},
    )
    assert loose.response.lstrip().startswith("{")


@slow
def test_tags_show_ps_and_version_describe_the_served_model(client, real_server):
    listed = client.list().models
    assert [m.model for m in listed] == ["smollm2"]
    assert listed[0].details.format == "gguf" and listed[0].details.family == "llama"
    assert listed[0].details.quantization_level == "Q4_1" and listed[0].size > 50_000_000
    shown = client.show("smollm2:latest")
    assert {"completion", "tools"} <= set(shown.capabilities) and "insert" not in shown.capabilities
    assert shown.modelinfo["llama.context_length"] == 8192 and "im_start" in shown.template
    loaded = client.ps().models
    assert [(m.model, m.context_length) for m in loaded] == [("smollm2", 8192)]
    assert loaded[0].size > 0 and loaded[0].expires_at.year >= 2026
    assert httpx.get(f"{real_server}/api/version").json()["version"].count(".") == 2


@slow
def test_load_only_requests_answer_done_with_load(client):
    assert client.generate(model="smollm2").done_reason == "load"
    assert client.chat(model="smollm2", messages=[]).done_reason == "load"


@slow
def test_images_on_a_text_only_model_become_placeholders(client):
    reply = client.chat(
        model="smollm2",
        messages=[{"role": "user", "content": "Hi", "images": ["aGVsbG8="]}],
        options={"num_predict": 2},
    )
    assert reply.done


HOSTILE = [
    ("/api/chat", {"messages": FRANCE, "options": {"temperature": "hot"}}, "options.temperature"),
    ("/api/chat", {"messages": FRANCE, "options": {"num_predict": 10**30}}, "options.num_predict"),
    ("/api/chat", {"messages": FRANCE, "options": {"num_ctx": -5}}, "options.num_ctx"),
    ("/api/chat", {"messages": FRANCE, "options": {"stop": [1]}}, "options.stop"),
    ("/api/chat", {"messages": FRANCE, "options": "fast"}, "options"),
    ("/api/chat", {"messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
    ("/api/chat", {"messages": FRANCE, "format": 5}, "format"),
    ("/api/chat", {"messages": FRANCE, "format": {"type": "nonsense"}}, "format"),
    ("/api/chat", {"messages": FRANCE, "think": "maybe"}, "think"),
    ("/api/chat", {"messages": FRANCE, "keep_alive": "forever"}, "keep_alive"),
    ("/api/chat", {"messages": FRANCE, "stream": "yes"}, "stream"),
    ("/api/generate", {"prompt": "x", "template": "{{ .Prompt }}"}, "template"),
    ("/api/generate", {"prompt": "x", "context": [1, 2]}, "context"),
    ("/api/generate", {"prompt": "x", "raw": True, "system": "s"}, "raw mode"),
    ("/api/generate", {"prompt": "x", "suffix": "y"}, "fill-in-the-middle"),
    ("/api/show", {"model": ""}, "model is required"),
]


@slow
@pytest.mark.parametrize(("path", "fields", "named"), HOSTILE)
def test_hostile_bodies_are_400s_in_ollamas_shape(real_server, path, fields, named):
    response = httpx.post(f"{real_server}{path}", json={"model": "smollm2", **fields}, timeout=60)
    assert response.status_code == 400, response.text
    assert list(response.json()) == ["error"] and named in response.json()["error"]


@slow
def test_the_client_raises_response_errors_and_the_server_stays_up(client, real_server):
    with pytest.raises(ollama.ResponseError) as caught:
        client.chat(model="smollm2", messages=FRANCE, options={"top_p": 7})
    assert caught.value.status_code == 400 and "top_p" in caught.value.error
    bad = httpx.post(
        f"{real_server}/api/chat",
        content=b"{not json",
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]
    huge = client.chat(
        model="smollm2", messages=FRANCE, options={"num_predict": 2_000_000_000, "temperature": 0}
    )
    assert huge.done  # a cap fitted to the context, as Ollama generates to the context's end
    assert httpx.get(f"{real_server}/health").status_code == 200


# -- controlled output -------------------------------------------------------------------


def test_tool_calls_in_ollamas_shape_streamed_equal_whole():
    with replay_client("Checking." + TOOL_REPLY, tool_call_parser="hermes") as (client, _):
        whole, pieces = chat_both(client, model="replay", messages=FRANCE, tools=[WEATHER_CHAT])
    (call,) = whole.message.tool_calls
    assert call.function.name == "get_weather"
    assert call.function.arguments == {"city": "Paris", "days": 3}
    assert whole.message.content == "Checking." and whole.done_reason == "stop"
    streamed = [c for p in pieces for c in p.message.tool_calls or []]
    assert [c.model_dump() for c in streamed] == [c.model_dump() for c in whole.message.tool_calls]
    assert joined(pieces, "content") == whole.message.content


def test_think_puts_the_reasoning_in_message_thinking():
    text = "<think>The user wants a city.</think>Paris."
    with replay_client(text, reasoning_parser="deepseek_r1") as (client, _):
        whole, pieces = chat_both(client, model="replay", messages=FRANCE, think=True)
        generated = client.generate(model="replay", prompt="Capital?", think=True)
    assert (whole.message.thinking, whole.message.content) == ("The user wants a city.", "Paris.")
    assert joined(pieces, "thinking") == whole.message.thinking
    assert joined(pieces, "content") == whole.message.content
    assert (generated.thinking, generated.response) == ("The user wants a city.", "Paris.")


def test_the_history_reaches_the_template_with_its_tool_call_and_result():
    history = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "content": "18C and sunny", "tool_name": "get_weather"},
    ]
    with echo_server(tool_call_parser="hermes") as (base, _):
        client = ollama.Client(host=base, timeout=60)
        echoed = client.chat(model="echo", messages=history, tools=[WEATHER_CHAT]).message
    # the rendered call, echoed, is read back as a call by the same parser
    assert [c.function.arguments for c in echoed.tool_calls] == [{"city": "Paris"}]
    assert "<tool_response>\n18C and sunny\n</tool_response>" in echoed.content


def test_a_failure_mid_stream_ends_with_an_error_line():
    with replay_server("Hello there, a long answer.", fail_after=2) as (base, _):
        client = ollama.Client(host=base, timeout=60)
        with pytest.raises(ollama.ResponseError, match="injected fault"):
            list(client.chat(model="replay", messages=FRANCE, stream=True))
        with httpx.stream("POST", f"{base}/api/generate", json={"prompt": "Hi"}) as response:
            lines = [json.loads(line) for line in response.iter_lines()]
        with pytest.raises(ollama.ResponseError) as caught:
            client.chat(model="replay", messages=FRANCE)
    assert response.headers["content-type"] == "application/x-ndjson"
    assert lines[-1] == {"error": "generation failed: injected fault"}
    assert all(not line.get("done") for line in lines[:-1])
    assert caught.value.status_code == 500


def test_images_refused_where_the_operator_rejects_media():
    with replay_client("Hi.", unsupported_media="reject") as (client, _):
        with pytest.raises(ollama.ResponseError) as caught:
            client.chat(
                model="replay", messages=[{"role": "user", "content": "x", "images": ["aGk="]}]
            )
    assert caught.value.status_code == 400 and "text only" in caught.value.error


def test_unknown_models_are_404s_with_strict_ids():
    runtime = build_replay_runtime("Hi.")
    state = ServerState(runtime.pipeline, "replay")
    state.models.strict = True
    try:
        with thread_server(create_app(state)) as base:
            client = ollama.Client(host=base, timeout=60)
            with pytest.raises(ollama.ResponseError) as chat_error:
                client.chat(model="llama3.2", messages=FRANCE)
            with pytest.raises(ollama.ResponseError) as show_error:
                client.show("llama3.2")
            assert client.chat(model="replay:latest", messages=FRANCE).message.content == "Hi."
    finally:
        runtime.close()
    assert chat_error.value.status_code == show_error.value.status_code == 404
    assert "llama3.2" in chat_error.value.error
