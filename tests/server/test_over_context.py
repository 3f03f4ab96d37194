"""Over-context requests answered in the words and codes clients act on, on every surface,
streamed and not, through the official SDKs (replay server with a small context): Claude
Code parses Anthropic's ``prompt is too long: N tokens > M maximum``; Codex and OpenAI
clients key on ``code: "context_length_exceeded"``."""

from __future__ import annotations

import re

import anthropic
import openai
import pytest
from servers import replay_server

LONG = "word " * 200  # well past a 64-token context


@pytest.fixture(scope="module")
def small():
    with replay_server("Hi.") as (base, runtime):
        runtime.pipeline.context_length = 64
        yield base


@pytest.fixture(scope="module")
def oa(small):
    return openai.OpenAI(base_url=f"{small}/v1", api_key="k", max_retries=0)


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_wording(small, stream):
    client = anthropic.Anthropic(base_url=small, api_key="k", max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model="any",
            max_tokens=32000 if stream else 8000,
            messages=[{"role": "user", "content": LONG}],
            stream=stream,
        )
    body = caught.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    match = re.fullmatch(r"prompt is too long: (\d+) tokens > 64 maximum", body["error"]["message"])
    assert match and int(match.group(1)) > 64


@pytest.mark.parametrize("stream", [False, True])
def test_chat_code_and_wording(oa, stream):
    with pytest.raises(openai.BadRequestError) as caught:
        oa.chat.completions.create(
            model="m", messages=[{"role": "user", "content": LONG}], stream=stream
        )
    error = caught.value.body
    assert error["code"] == "context_length_exceeded" and error["param"] == "messages"
    assert error["type"] == "invalid_request_error"
    assert re.match(
        r"This model's maximum context length is 64 tokens\. However, your messages resulted "
        r"in \d+ tokens\.",
        error["message"],
    )


def test_chat_completion_limit_past_the_context(oa):
    with pytest.raises(openai.BadRequestError) as caught:
        oa.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=100
        )
    error = caught.value.body
    assert error["code"] == "context_length_exceeded" and error["param"] == "max_tokens"
    assert "100 in the completion" in error["message"]


def test_completions_code(oa):
    with pytest.raises(openai.BadRequestError) as caught:
        oa.completions.create(model="m", prompt=LONG)
    error = caught.value.body
    assert error["code"] == "context_length_exceeded" and error["param"] == "prompt"
    assert "your prompt resulted in" in error["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_code(oa, stream):
    with pytest.raises(openai.BadRequestError) as caught:
        if stream:
            with oa.responses.stream(model="gpt-5-codex", input=LONG) as events:
                list(events)
        else:
            oa.responses.create(model="gpt-5-codex", input=LONG)
    error = caught.value.body
    assert error["code"] == "context_length_exceeded" and error["param"] == "input"
    assert error["message"].startswith("Your input exceeds the context window of this model.")
