"""`--max-model-len`: the real CLI server (replay source, real tokenizer) reports the cap in
/v1/models and refuses prompts past it with each API's own context error."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest
from servers import cli_server

from vllm_mlx.runtime import DEFAULT_CONTEXT_LENGTH, context_limit

CAP = 40


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cap")
    replay = tmp / "replay.txt"
    replay.write_text("ok")
    args = ("--replay", str(replay), "--max-model-len", str(CAP))
    with cli_server(*args, log_path=tmp / "server.log", timeout=120) as base:
        yield base


def test_models_reports_the_cap(capped):
    models = httpx.get(f"{capped}/v1/models").json()["data"]
    assert models[0]["max_model_len"] == CAP


def test_short_prompt_still_served(capped):
    client = openai.OpenAI(base_url=f"{capped}/v1", api_key="x", max_retries=0)
    reply = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=5
    )
    assert reply.choices[0].message.content == "ok"


def test_openai_prompt_past_the_cap_is_a_context_error(capped):
    client = openai.OpenAI(base_url=f"{capped}/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "word " * 60}]
        )
    assert f"maximum context length is {CAP} tokens" in str(err.value)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="m", prompt=list(range(100, 100 + CAP)))


def test_openai_max_tokens_past_the_cap_is_a_context_error(capped):
    client = openai.OpenAI(base_url=f"{capped}/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="m", prompt="hi", max_tokens=CAP)
    assert err.value.body.get("param") == "max_tokens"


def test_anthropic_prompt_past_the_cap_is_a_context_error(capped):
    client = anthropic.Anthropic(base_url=capped, api_key="x", max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as err:
        client.messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "word " * 60}]
        )
    assert err.value.body["error"]["type"] == "invalid_request_error"


def test_context_limit_rules():
    assert context_limit(8192, None) == 8192
    assert context_limit(None, None) == DEFAULT_CONTEXT_LENGTH
    assert context_limit(8192, 1024) == 1024
    assert context_limit(None, 100_000) == 100_000  # unknown model context: trust the cap
    with pytest.raises(ValueError, match="exceeds"):
        context_limit(8192, 16384)
