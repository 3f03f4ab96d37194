"""POST /v1/embeddings through the official openai client on a real server: tiny encoder
and decoder embedders, a tiny chat model pooled, and the embedded default model."""

from __future__ import annotations

import base64
import threading

import httpx
import numpy as np
import openai
import pytest
from embedding_models import bert_tokenizer

TEXTS = ["hello world", "the cat is a dog", "paris is the capital of france", "one"]


@pytest.fixture(scope="module")
def client(embedding_server):
    return openai.OpenAI(
        base_url=f"{embedding_server}/v1", api_key="unused", max_retries=0, timeout=120
    )


def _vectors(response) -> np.ndarray:
    return np.array([d.embedding for d in sorted(response.data, key=lambda d: d.index)])


@pytest.mark.parametrize(("model", "width"), [("bert-embed", 32), ("qwen3-embed", 32)])
def test_embeddings_of_a_list_are_each_inputs_own(client, model, width):
    response = client.embeddings.create(model=model, input=TEXTS)
    assert response.model == model and response.object == "list"
    vectors = _vectors(response)
    assert vectors.shape == (len(TEXTS), width)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    alone = [client.embeddings.create(model=model, input=t) for t in TEXTS]
    for i, single in enumerate(alone):
        assert np.allclose(vectors[i], single.data[0].embedding, atol=1e-5), i
    assert response.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    assert response.usage.total_tokens == response.usage.prompt_tokens


def test_base64_is_the_same_floats(client, embedding_server):
    """The SDK asks for base64 when the caller names no format, and decodes it; asked for
    explicitly, the strings reach the caller: float32 little-endian bytes."""
    default = _vectors(client.embeddings.create(model="bert-embed", input=TEXTS))
    floats = client.embeddings.create(model="bert-embed", input=TEXTS, encoding_format="float")
    assert isinstance(floats.data[0].embedding[0], float)
    assert np.allclose(default, _vectors(floats), atol=1e-7)
    encoded = client.embeddings.create(model="bert-embed", input=TEXTS, encoding_format="base64")
    rows = [np.frombuffer(base64.b64decode(d.embedding), dtype="<f4") for d in encoded.data]
    assert np.allclose(np.array(rows), _vectors(floats), atol=1e-7)


def test_token_id_inputs(client):
    by_text = client.embeddings.create(model="bert-embed", input=TEXTS[:2])
    ids = [bert_tokenizer()(t)["input_ids"] for t in TEXTS[:2]]
    one = client.embeddings.create(model="bert-embed", input=ids[0])
    many = client.embeddings.create(model="bert-embed", input=ids)
    assert one.usage.prompt_tokens == len(ids[0])
    assert np.allclose(_vectors(one)[0], _vectors(many)[0], atol=1e-6)
    assert np.allclose(_vectors(many), _vectors(by_text), atol=1e-5)


def test_dimensions(client):
    full = _vectors(client.embeddings.create(model="bert-embed", input=TEXTS))
    short = _vectors(client.embeddings.create(model="bert-embed", input=TEXTS, dimensions=8))
    assert short.shape == (len(TEXTS), 8)
    assert np.allclose(short, full[:, :8] / np.linalg.norm(full[:, :8], axis=1, keepdims=True))
    listed = client.embeddings.create(model="qwen3-embed", input=TEXTS, dimensions=16)
    assert len(listed.data[0].embedding) == 16
    for model, size, words in [
        ("bert-cls", 8, "does not support matryoshka"),
        ("qwen3-embed", 12, "supports dimensions 8, 16, not 12"),
        ("bert-embed", 64, "between 1 and 32"),
    ]:
        with pytest.raises(openai.BadRequestError) as error:
            client.embeddings.create(model=model, input="a", dimensions=size)
        assert words in error.value.message
        assert error.value.body["param"] == "dimensions"


def test_a_chat_model_embeds_by_pooling(client):
    mean = client.embeddings.create(model="chat", input=TEXTS)
    last = client.embeddings.create(model="chat", input=TEXTS, extra_body={"pooling": "last"})
    assert _vectors(mean).shape == _vectors(last).shape == (len(TEXTS), 32)
    assert not np.allclose(_vectors(mean), _vectors(last), atol=1e-3)
    alone = client.embeddings.create(model="chat", input=TEXTS[2], extra_body={"pooling": "last"})
    assert np.allclose(_vectors(last)[2], alone.data[0].embedding, atol=1e-5)
    with pytest.raises(openai.BadRequestError, match="pools its own way"):
        client.embeddings.create(model="qwen3-embed", input="a", extra_body={"pooling": "mean"})


def test_embedding_while_a_chat_stream_runs(client):
    """Both finish: the embeddings run on their own thread and stream beside the engine's."""
    streamed: list[str] = []

    def chat() -> None:
        stream = client.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=40,
            stream=True,
        )
        for chunk in stream:
            if chunk.choices and chunk.choices[0].finish_reason:
                streamed.append(chunk.choices[0].finish_reason)

    thread = threading.Thread(target=chat)
    thread.start()
    for _ in range(3):
        assert len(client.embeddings.create(model="bert-embed", input=TEXTS * 8).data) == 32
        # the chat model's own weights, from the worker thread while the engine decodes
        assert len(client.embeddings.create(model="chat", input=TEXTS * 8).data) == 32
    thread.join(timeout=120)
    assert streamed and streamed[-1] in ("length", "stop")


LONG = " ".join(["cat"] * 70)


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"input": []}, "input", "at least one input"),
        ({"input": ""}, "input", "empty string"),
        ({"input": [[]]}, "input", "is empty"),
        ({"input": [1.5, 2]}, "input", "valid"),
        ({"input": [True]}, "input", "valid"),
        ({"input": {"text": "a"}}, "input", "valid"),
        ({"input": [1, "a"]}, "input", "valid"),
        ({"input": [[1, 2], [3, 10**12]]}, "input", "outside this model's vocabulary"),
        ({"input": [-3]}, "input", "outside this model's vocabulary"),
        ({"input": ["a"] * 2049}, "input", "over the 2048"),
        ({"input": ["dog", LONG]}, "input", "over this model's maximum input length of 64"),
        ({"input": "a", "encoding_format": "int8"}, "encoding_format", "float"),
        ({"input": "a", "dimensions": 0}, "dimensions", "greater than or equal to 1"),
        ({"input": "a", "dimensions": "8"}, "dimensions", "valid integer"),
        ({"input": "a", "pooling": "max"}, "pooling", "mean"),
        ({}, "input", "required"),
    ],
)
def test_hostile_requests_get_openai_400s(embedding_server, body, param, words):
    response = httpx.post(
        f"{embedding_server}/v1/embeddings", json={"model": "bert-embed", **body}, timeout=60
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param and words in error["message"], error


def test_model_ids_that_cannot_embed(client, embedding_server):
    with pytest.raises(openai.BadRequestError, match="is a reranker: use /v1/rerank"):
        client.embeddings.create(model="bert-reranker", input="a")
    with pytest.raises(openai.BadRequestError, match="is an embedding model: use /v1/embeddings"):
        client.chat.completions.create(
            model="bert-embed", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    response = httpx.post(
        f"{embedding_server}/v1/embeddings",
        content=b"{not json",
        timeout=30,
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400 and "error" in response.json()


def test_models_list_says_what_each_model_serves(client):
    listed = {m.id: m.model_dump() for m in client.models.list().data}
    assert listed["bert-embed"]["type"] == "embeddings"
    assert listed["bert-embed"]["capabilities"]["embeddings"] is True
    assert listed["bert-embed"]["context_length"] == 64
    assert listed["bert-reranker"]["type"] == listed["qwen3-reranker"]["type"] == "rerank"
    assert listed["chat"]["type"] == "llm"


def test_the_embedded_model_embeds_by_pooling(openai_client):
    """The default model (30 layers, width 576): batched equals alone, for both poolings."""
    texts = ["The capital of France is Paris.", "def add(a, b): return a + b", "hello"]
    for pooling in ("mean", "last"):
        response = openai_client.embeddings.create(
            model="smollm2", input=texts, extra_body={"pooling": pooling}
        )
        vectors = _vectors(response)
        assert vectors.shape == (3, 576)
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
        for i, text in enumerate(texts):
            alone = openai_client.embeddings.create(
                model="smollm2", input=text, extra_body={"pooling": pooling}
            )
            assert np.allclose(vectors[i], alone.data[0].embedding, atol=2e-4), (pooling, i)
    with pytest.raises(openai.BadRequestError, match="does not support matryoshka"):
        openai_client.embeddings.create(model="smollm2", input="a", dimensions=64)
