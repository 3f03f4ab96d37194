"""Adapters over real HTTP with the official openai client: served by id (its name or
``BASE:NAME``) and listed with their base, base and adapters answering in one batch as
they do alone, loaded and unloaded at run time behind the API key, a mismatched adapter
refused with a 400 naming the layer."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import anthropic
import httpx
import ollama
import openai
import pytest
from servers import cli_server
from tiny_adapters import MAX_TOKENS, PROMPT, write_adapter, write_base

from vllm_mlx.models.loader import load_tokenizer_only

KEY = "sekrit"


@pytest.fixture(scope="module")
def server(fleet, tmp_path_factory):
    log = tmp_path_factory.mktemp("adapter-server") / "server.log"
    args = (str(fleet.base), "--served-model-name", "base", "--adapter", f"lora={fleet.lora}")
    args += ("--adapter", f"merged={fleet.last}", "--adapter-fuse", "merged")
    args += ("--api-key", KEY, "--strict-model-ids", "--temperature", "0")
    with cli_server(*args, log_path=log) as base:
        yield base


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key=KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def expected_text(fleet):
    tokenizer = load_tokenizer_only(str(fleet.base)).tokenizer

    def text(name):
        tokens = fleet.expected[name]
        eos = set(tokenizer.eos_token_ids)
        cut = next((i for i, t in enumerate(tokens) if t in eos), len(tokens))
        return tokenizer.decode(tokens[:cut])

    return text


def complete(client, model):
    response = client.completions.create(
        model=model, prompt=PROMPT, max_tokens=MAX_TOKENS, temperature=0
    )
    return response.model, response.choices[0].text


def test_models_lists_the_adapter_with_its_base(client):
    cards = {m.id: m for m in client.models.list().data}
    assert cards["lora"].model_extra["parent"] == "base"
    assert "base" in cards


def test_chat_surfaces_run_the_adapter_their_model_id_names(client, server):
    messages = [{"role": "user", "content": "Hello there"}]

    def chat(model):
        reply = client.chat.completions.create(
            model=model, messages=messages, max_tokens=8, temperature=0
        )
        return reply.model, reply.choices[0].message.content

    (model, tuned), (_, plain) = chat("base:lora"), chat("base")
    assert model == "lora" and tuned != plain
    claude = anthropic.Anthropic(base_url=server, api_key=KEY, max_retries=0)
    message = claude.messages.create(model="lora", max_tokens=8, messages=messages)
    assert message.model == "lora" and message.content[0].text == tuned
    local = ollama.Client(host=server, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    reply = local.chat(model="lora:latest", messages=messages, options={"num_predict": 8})
    assert reply.message.content == tuned


def test_a_fused_adapter_is_a_model_of_its_own(client, expected_text):
    cards = {m.id: m for m in client.models.list().data}
    assert "parent" not in cards["merged"].model_extra
    model, text = complete(client, "merged")
    assert model == "merged" and text != expected_text(None)


def test_an_adapter_answers_as_mlx_lm_does_by_either_id(client, expected_text):
    assert expected_text("lora") != expected_text(None)
    assert complete(client, "lora") == ("lora", expected_text("lora"))
    assert complete(client, "base:lora") == ("lora", expected_text("lora"))
    assert complete(client, "base") == ("base", expected_text(None))


def test_load_batch_and_unload_at_run_time(client, fleet, expected_text):
    anonymous = openai.OpenAI(base_url=client.base_url, api_key="wrong", max_retries=0)
    body = {"name": "dora", "path": str(fleet.dora)}
    with pytest.raises(openai.AuthenticationError):
        anonymous.post("/adapters", body=body, cast_to=object)
    card = client.post("/adapters", body=body, cast_to=object)
    assert card["parent"] == "base" and card["adapter"] == {
        "loaded": True,
        "kind": "dora",
        "rank": 4,
    }
    names = ["lora", "base", "dora", "base:dora", "lora"]
    with ThreadPoolExecutor(len(names)) as pool:
        answers = list(pool.map(lambda name: complete(client, name)[1], names))
    expected = {"lora": "lora", "base": None, "dora": "dora", "base:dora": "dora"}
    assert answers == [expected_text(expected[n]) for n in names]
    health = httpx.get(f"{str(client.base_url).removesuffix('/v1/')}/health").json()
    assert health["models"]["adapters"]["base"] == ["dora", "lora"]
    deleted = client.delete("/adapters/dora", cast_to=object)
    assert deleted == {"id": "dora", "deleted": True, "was_loaded": True}
    with pytest.raises(openai.NotFoundError):
        complete(client, "dora")


def test_a_mismatched_adapter_is_refused_naming_the_layer(client, tmp_path):
    other = write_base(tmp_path / "other", hidden=32)
    adapter = write_adapter(other, tmp_path / "other-adapter", seed=3)
    with pytest.raises(openai.BadRequestError, match="trained on another base model"):
        client.post("/adapters", body={"name": "other", "path": str(adapter)}, cast_to=object)
    with pytest.raises(openai.BadRequestError, match="not an adapter folder"):
        client.post("/adapters", body={"name": "x", "path": str(tmp_path)}, cast_to=object)
    assert "other" not in {m.id for m in client.models.list().data}
    assert complete(client, "lora")[0] == "lora"  # the server kept serving
