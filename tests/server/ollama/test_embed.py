"""/api/embed and /api/embeddings through the official ollama client on a real server with
tiny embedding models: the same unit vectors as /v1/embeddings, one per input, Ollama's
legacy single-prompt route, and refusals in Ollama's error shape."""

from __future__ import annotations

import httpx
import numpy as np
import ollama
import pytest

TEXTS = ["hello world", "the cat is a dog", "paris is the capital of france"]


@pytest.fixture(scope="module")
def client(embedding_server):
    return ollama.Client(host=embedding_server, timeout=120)


def test_embed_answers_the_same_vectors_as_v1_embeddings(client, embedding_server):
    reply = client.embed(model="bert-embed", input=TEXTS)
    mine = np.array(reply.embeddings)
    openai_shape = httpx.post(
        f"{embedding_server}/v1/embeddings", json={"model": "bert-embed", "input": TEXTS}
    ).json()
    theirs = np.array([d["embedding"] for d in openai_shape["data"]])
    assert mine.shape == (3, 32) and reply.model == "bert-embed"
    np.testing.assert_allclose(mine, theirs, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(mine, axis=1), 1.0, atol=1e-5)
    assert reply.prompt_eval_count == openai_shape["usage"]["prompt_tokens"]
    one = client.embed(model="bert-embed:latest", input=TEXTS[0])
    np.testing.assert_allclose(one.embeddings[0], mine[0], atol=1e-5)


def test_matryoshka_dimensions_and_the_legacy_route(client):
    short = client.embed(model="bert-embed", input=TEXTS, dimensions=16)
    assert np.array(short.embeddings).shape == (3, 16)
    legacy = client.embeddings(model="bert-embed", prompt=TEXTS[0])
    whole = client.embed(model="bert-embed", input=TEXTS[0])
    np.testing.assert_allclose(legacy.embedding, whole.embeddings[0], atol=1e-6)
    assert client.embed(model="bert-embed", input=[]).embeddings == []


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"model": "bert-embed", "input": 5}, "input"),
        ({"model": "bert-embed", "input": ["a"], "dimensions": 0}, "dimensions"),
        ({"model": "bert-reranker", "input": ["a"]}, "reranker"),
        ({"model": "bert-embed", "input": ["a"], "keep_alive": "soon"}, "keep_alive"),
    ],
)
def test_bad_embed_requests_are_400s_in_ollamas_shape(embedding_server, fields, named):
    response = httpx.post(f"{embedding_server}/api/embed", json=fields, timeout=60)
    assert response.status_code == 400 and named in response.json()["error"]
