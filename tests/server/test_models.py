"""Model listing through both official SDKs: OpenAI's shape (with the context window under
the names clients read) and, for requests carrying ``anthropic-version``, Anthropic's;
``/v1/models/{id}`` answers for the served id and for any id a request may name."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest
from servers import replay_server


@pytest.fixture(scope="module")
def base():
    with replay_server("Hi.", tool_call_parser="hermes") as (url, _):
        yield url


def test_openai_list_and_retrieve(base):
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0)
    (model,) = client.models.list().data
    assert model.id == "replay" and model.object == "model"
    extra = model.model_extra or {}
    assert extra["max_model_len"] == extra["context_length"] == extra["context_window"] > 0
    assert extra["capabilities"]["tool_calls"] is True
    assert client.models.retrieve("replay").id == "replay"
    other = client.models.retrieve("gpt-5-codex")  # any id a request may name is served
    assert other.id == "gpt-5-codex" and (other.model_extra or {})["root"] == "replay"


def test_anthropic_list_and_retrieve(base):
    client = anthropic.Anthropic(base_url=base, api_key="k", max_retries=0)
    page = client.models.list()
    (model,) = page.data
    assert (model.type, model.id, model.display_name) == ("model", "replay", "replay")
    assert model.created_at.year >= 2025
    assert (page.has_more, page.first_id, page.last_id) == (False, "replay", "replay")
    assert client.models.retrieve("claude-sonnet-4-5").id == "claude-sonnet-4-5"


def test_without_anthropic_version_the_shape_is_openai(base):
    body = httpx.get(f"{base}/v1/models").json()
    assert body["object"] == "list" and "has_more" not in body
