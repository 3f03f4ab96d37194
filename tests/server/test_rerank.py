"""POST /v1/rerank and /rerank (Cohere/Jina shape) on a real server: a BERT cross-encoder
and a Qwen3-Reranker-style decoder, both tiny and random-weight."""

from __future__ import annotations

import httpx
import pytest

QUERY = "what is the capital of france"
DOCUMENTS = [
    "paris is the capital of france",
    "a dog",
    {"text": "the weather is rain"},
    "cats and dogs",
    "london is a city in england",
]
TEXTS = [d if isinstance(d, str) else d["text"] for d in DOCUMENTS]


def _rerank(base: str, path: str = "/v1/rerank", **body) -> httpx.Response:
    return httpx.post(f"{base}{path}", json=body, timeout=120)


@pytest.mark.parametrize("model", ["bert-reranker", "qwen3-reranker"])
def test_results_are_sorted_scores_of_each_document(embedding_server, model):
    response = _rerank(embedding_server, model=model, query=QUERY, documents=DOCUMENTS)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == model and body["id"].startswith("rerank-")
    results = body["results"]
    assert sorted(r["index"] for r in results) == list(range(len(DOCUMENTS)))
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True) and all(0 <= s <= 1 for s in scores)
    assert all(r["document"] == {"text": TEXTS[r["index"]]} for r in results)
    assert body["usage"]["total_tokens"] > 0
    # each document's score is its own: alone it scores the same
    for result in results[:2]:
        alone = _rerank(
            embedding_server, model=model, query=QUERY, documents=[TEXTS[result["index"]]]
        ).json()["results"][0]
        assert alone["index"] == 0
        assert abs(alone["relevance_score"] - result["relevance_score"]) < 1e-5


def test_top_n_and_return_documents(embedding_server):
    full = _rerank(
        embedding_server, model="bert-reranker", query=QUERY, documents=DOCUMENTS
    ).json()["results"]
    top = _rerank(
        embedding_server,
        "/rerank",
        model="bert-reranker",
        query=QUERY,
        documents=DOCUMENTS,
        top_n=2,
        return_documents=False,
    ).json()["results"]
    assert [r["index"] for r in top] == [r["index"] for r in full[:2]]
    assert all("document" not in r for r in top)
    many = _rerank(
        embedding_server, model="bert-reranker", query=QUERY, documents=DOCUMENTS, top_n=50
    ).json()["results"]
    assert len(many) == len(DOCUMENTS)


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"query": QUERY, "documents": []}, "documents", "at least one document"),
        ({"query": "", "documents": ["a"]}, "query", "empty string"),
        ({"query": QUERY, "documents": [{"txt": "a"}]}, "documents.0", "valid string"),
        ({"query": QUERY, "documents": [3]}, "documents.0", "valid"),
        ({"query": QUERY, "documents": "a"}, "documents", "valid list"),
        ({"query": QUERY, "documents": ["a"], "top_n": -1}, "top_n", "greater than or equal"),
        ({"query": QUERY, "documents": ["a"] * 1001}, "documents", "over the 1000"),
        ({"query": QUERY, "documents": ["cat " * 70]}, "documents", "maximum input length"),
        ({"documents": ["a"]}, "query", "required"),
    ],
)
def test_hostile_requests_get_400s(embedding_server, body, param, words):
    response = _rerank(embedding_server, model="bert-reranker", **body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param and words in error["message"], error


@pytest.mark.parametrize("model", ["bert-embed", "chat"])
def test_models_that_are_not_rerankers(embedding_server, model):
    response = _rerank(embedding_server, model=model, query=QUERY, documents=["a"])
    assert response.status_code == 400
    assert "not a reranker" in response.json()["error"]["message"]
