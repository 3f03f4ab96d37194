"""The real default model behind the real server, driven by the official openai SDK."""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest
from comparing import comparable_usage
from shared import FRANCE

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tokenizer():
    from mlx_lm.utils import load_tokenizer

    from vllm_mlx.models.resolve import resolve_model

    return load_tokenizer(resolve_model(None, progress=False))


def test_models_lists_the_served_name(openai_client):
    assert [m.id for m in openai_client.models.list().data] == ["smollm2"]


@pytest.mark.mac_path
def test_chat_answers_and_counts_tokens(openai_client, tokenizer):
    reply = openai_client.chat.completions.create(
        model="claude-sonnet-4-5", messages=FRANCE, temperature=0, max_tokens=12
    )
    assert reply.model == "smollm2"
    assert "Paris" in reply.choices[0].message.content
    prompt_ids = tokenizer.apply_chat_template(FRANCE, add_generation_prompt=True)
    assert reply.usage.prompt_tokens == len(prompt_ids)
    answer_ids = tokenizer.encode(reply.choices[0].message.content, add_special_tokens=False)
    # EOS counts as a generated token when the model stops by itself
    extra = 1 if reply.choices[0].finish_reason == "stop" else 0
    assert reply.usage.completion_tokens == len(answer_ids) + extra
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


@pytest.mark.mac_path
def test_stream_equals_non_stream(openai_client):
    kwargs = dict(model="x", messages=FRANCE, temperature=0, max_tokens=12)
    whole = openai_client.chat.completions.create(**kwargs)
    chunks = list(
        openai_client.chat.completions.create(
            **kwargs, stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == whole.choices[0].finish_reason
    assert all(f is None for f in finishes[:-1])
    assert chunks[-1].choices == []
    assert comparable_usage(chunks[-1].usage) == comparable_usage(whole.usage)


def test_max_tokens_truncates_with_length(openai_client):
    reply = openai_client.chat.completions.create(
        model="x", messages=FRANCE, temperature=0, max_tokens=3
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 3


def test_stop_string_spanning_tokens_is_not_leaked(openai_client):
    full = (
        openai_client.chat.completions.create(
            model="x", messages=FRANCE, temperature=0, max_tokens=12
        )
        .choices[0]
        .message.content
    )
    assert " is Paris" in full
    for stream in (False, True):
        kwargs = dict(
            model="x", messages=FRANCE, temperature=0, max_tokens=12, stop=["is Pa"], stream=stream
        )
        if stream:
            chunks = list(openai_client.chat.completions.create(**kwargs))
            text = "".join(c.choices[0].delta.content or "" for c in chunks)
            finish = chunks[-1].choices[0].finish_reason
        else:
            reply = openai_client.chat.completions.create(**kwargs)
            text, finish = reply.choices[0].message.content, reply.choices[0].finish_reason
        assert text == full[: full.index("is Pa")]
        assert finish == "stop"


def test_completions_stream_and_non_stream(openai_client):
    kwargs = dict(model="x", prompt="The capital of France is", temperature=0, max_tokens=6)
    whole = openai_client.completions.create(**kwargs)
    assert whole.choices[0].text and whole.choices[0].finish_reason in ("stop", "length")
    streamed = list(openai_client.completions.create(**kwargs, stream=True))
    assert "".join(c.choices[0].text for c in streamed) == whole.choices[0].text
    assert streamed[-1].choices[0].finish_reason == whole.choices[0].finish_reason


def test_logprobs(openai_client):
    reply = openai_client.chat.completions.create(
        model="x", messages=FRANCE, temperature=0, max_tokens=4, logprobs=True, top_logprobs=3
    )
    entries = reply.choices[0].logprobs.content
    assert len(entries) == 4
    for entry in entries:
        assert len(entry.top_logprobs) == 3
        # greedy: the chosen token is the most likely one
        assert entry.logprob == pytest.approx(entry.top_logprobs[0].logprob, abs=1e-4)


def test_seed_makes_sampling_repeatable(openai_client):
    kwargs = dict(model="x", messages=FRANCE, temperature=1.0, max_tokens=8, seed=1234)
    first = openai_client.chat.completions.create(**kwargs).choices[0].message.content
    second = openai_client.chat.completions.create(**kwargs).choices[0].message.content
    assert first == second


@pytest.mark.mac_path
def test_concurrent_clients_all_served(openai_client):
    results: dict[int, str] = {}

    def ask(i: int) -> None:
        reply = openai_client.chat.completions.create(
            model="x", messages=FRANCE, temperature=0, max_tokens=8
        )
        results[i] = reply.choices[0].message.content

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results.values())) == 1 and len(results) == 3


def test_disconnect_stops_generation(real_server, openai_client):
    body = {
        "model": "x",
        "messages": FRANCE,
        "max_tokens": 2000,
        "temperature": 1.0,
        "stream": True,
        "logit_bias": {"2": -100},
    }  # no EOS: it would run for minutes
    with httpx.stream(
        "POST", f"{real_server}/v1/chat/completions", json=body, timeout=60
    ) as response:
        lines = response.iter_lines()
        got = [next(lines) for _ in range(6)]
    assert any(line.startswith("data: ") for line in got)
    deadline = time.monotonic() + 60
    while httpx.get(f"{real_server}/health").json()["running"]:
        assert time.monotonic() < deadline, "generation kept running after the disconnect"
        time.sleep(0.2)
    reply = openai_client.chat.completions.create(
        model="x", messages=FRANCE, temperature=0, max_tokens=4
    )
    assert reply.choices[0].message.content


BAD_REQUESTS = [
    ("malformed json", b"{not json", 400, None),
    ("not an object", b"[1, 2]", 400, None),
    ("missing messages", {"model": "x"}, 400, "messages"),
    ("empty messages", {"messages": []}, 400, "messages"),
    ("unknown role", {"messages": [{"role": "wizard", "content": "hi"}]}, 400, "messages.0.role"),
    ("max_tokens zero", {"messages": FRANCE, "max_tokens": 0}, 400, "max_tokens"),
    ("max_tokens past context", {"messages": FRANCE, "max_tokens": 10**6}, 400, "max_tokens"),
    ("n past the limit", {"messages": FRANCE, "n": 17}, 400, "n"),
    ("temperature wrong type", {"messages": FRANCE, "temperature": "hot"}, 400, "temperature"),
    (
        "tool_choice without tools",
        {"messages": FRANCE, "tool_choice": "required"},
        400,
        "tool_choice",
    ),
]


@pytest.mark.parametrize("name,body,status,param", BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
def test_bad_input_gets_openai_error_shape(real_server, name, body, status, param):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = httpx.post(
        f"{real_server}/v1/chat/completions",
        content=content,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["message"]
    if param is not None:
        assert error["param"] == param


def test_oversized_body_is_413(real_server):
    huge = json.dumps({"messages": [{"role": "user", "content": "x" * (17 * 1024 * 1024)}]})
    response = httpx.post(
        f"{real_server}/v1/chat/completions",
        content=huge,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert response.status_code == 413
    assert "exceeds" in response.json()["error"]["message"]


def test_unknown_route_is_404_in_openai_shape(real_server):
    response = httpx.get(f"{real_server}/v1/nothing-here")
    assert response.status_code == 404 and "error" in response.json()


def test_sdk_raises_on_bad_request(openai_client):
    with pytest.raises(openai.BadRequestError):
        openai_client.chat.completions.create(model="x", messages=[], max_tokens=3)
    # and the server is still serving
    assert openai_client.models.list().data


@pytest.mark.mac_path
def test_repeated_prompt_reports_cached_tokens_and_same_answer(openai_client):
    messages = [{"role": "user", "content": "Name three colours of the rainbow, please."}]
    first = openai_client.chat.completions.create(
        model="x", messages=messages, temperature=0, max_tokens=8
    )
    again = openai_client.chat.completions.create(
        model="x", messages=messages, temperature=0, max_tokens=8
    )
    assert again.choices[0].message.content == first.choices[0].message.content
    assert again.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens - 1
