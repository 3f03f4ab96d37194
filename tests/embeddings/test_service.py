"""The embedding service in-process on tiny random-weight models: what a folder is, pooled
vectors (batched equal to alone), dimensions, limits and hostile inputs, reranker scores."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from embedding_models import (
    BERT_HIDDEN,
    BERT_MAX_POSITIONS,
    write_bert_cross_encoder,
    write_bert_embedder,
    write_modernbert_cross_encoder,
    write_modernbert_embedder,
    write_qwen3_embedder,
    write_xlmr_cross_encoder,
    write_xlmr_embedder,
    write_yes_no_reranker,
)
from fleet.models_dir import write_tiny_folder
from tiny_models import build_tiny_model, build_tiny_tokenizer, tiny_vocab_size

from vllm_mlx.embeddings import service
from vllm_mlx.embeddings.decoders import DecoderEmbedder
from vllm_mlx.embeddings.encoders import gelu_without_erf
from vllm_mlx.embeddings.kinds import model_facts
from vllm_mlx.embeddings.load import load_embedding_model
from vllm_mlx.embeddings.service import Embedder, EmbeddingError, Reranker, batches

TEXTS = [
    "hello world",
    "the cat is a dog and the dog is a cat",
    "paris",
    "what is the capital city of france? paris is the capital",
    "one two three",
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("embedding-models")
    return {
        "bert": write_bert_embedder(root / "bert", is_matryoshka=True),
        "bert-cls": write_bert_embedder(root / "bert-cls", pooling="cls"),
        "qwen3": write_qwen3_embedder(root / "qwen3", matryoshka_dimensions=[8, 16]),
        "xlmr": write_xlmr_embedder(root / "xlmr"),
        "modernbert": write_modernbert_embedder(root / "modernbert"),
        "cross": write_bert_cross_encoder(root / "cross"),
        "xlmr-cross": write_xlmr_cross_encoder(root / "xlmr-cross"),
        "modernbert-cross": write_modernbert_cross_encoder(root / "modernbert-cross"),
        "yes-no": write_yes_no_reranker(root / "Tiny-Qwen3-Reranker"),
        "chat": write_tiny_folder(root / "chat"),
    }


@pytest.fixture(scope="module")
def models(folders):
    return {
        name: load_embedding_model(name, path, model_facts(path))
        for name, path in folders.items()
        if name != "chat"
    }


@pytest.fixture(scope="module")
def decoder():
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, seed=4)
    vocab = tiny_vocab_size(tokenizer)
    return {
        pooling: DecoderEmbedder(
            "tiny", model, tokenizer, vocab_size=vocab, max_length=256, pooling=pooling
        )
        for pooling in ("mean", "last")
    }


def test_what_each_folder_serves(folders):
    facts = {name: model_facts(path) for name, path in folders.items()}
    assert facts["chat"] is None
    assert (facts["bert"].kind, facts["bert"].pooling) == ("embedding", "mean")
    assert facts["bert"].max_length == BERT_MAX_POSITIONS and facts["bert"].matryoshka is True
    assert facts["bert-cls"].pooling == "cls" and facts["bert-cls"].matryoshka is False
    assert (facts["qwen3"].kind, facts["qwen3"].pooling) == ("embedding", "last")
    assert facts["qwen3"].matryoshka == (8, 16)
    assert facts["cross"].kind == facts["xlmr-cross"].kind == "cross_encoder"
    assert (facts["xlmr"].model_type, facts["xlmr"].pooling) == ("xlm_roberta", "cls")
    assert facts["xlmr"].max_length == BERT_MAX_POSITIONS  # RoBERTa's two offset rows
    assert (facts["modernbert"].model_type, facts["modernbert"].pooling) == ("modernbert", "mean")
    assert facts["yes-no"].kind == "yes_no_reranker"
    assert facts["yes-no"].score_tokens == ("a", "ok")


def _embedders(models, decoder) -> dict[str, Embedder]:
    found = {n: m for n, m in models.items() if isinstance(m, Embedder)}
    return {**found, "decoder-mean": decoder["mean"], "decoder-last": decoder["last"]}


def test_a_batch_embeds_each_input_as_alone(models, decoder):
    for name, embedder in _embedders(models, decoder).items():
        together = embedder.embed_sync(TEXTS)
        assert together.vectors.shape == (len(TEXTS), embedder.dimensions), name
        assert np.allclose(np.linalg.norm(together.vectors, axis=1), 1.0, atol=1e-5), name
        alone = [embedder.embed_sync([t]) for t in TEXTS]
        for i, single in enumerate(alone):
            assert np.allclose(together.vectors[i], single.vectors[0], atol=1e-5), (name, i)
        assert together.prompt_tokens == sum(a.prompt_tokens for a in alone)
        # distinct inputs, distinct vectors (the pooling sees the tokens)
        assert not np.allclose(together.vectors[0], together.vectors[1], atol=1e-3), name


def test_pooling_is_what_the_model_declares(models, decoder):
    bert_mean, bert_cls = models["bert"], models["bert-cls"]
    assert bert_mean.pooling == "mean" and bert_cls.pooling == "cls"
    mean, last = decoder["mean"].embed_sync(TEXTS), decoder["last"].embed_sync(TEXTS)
    assert not np.allclose(mean.vectors, last.vectors, atol=1e-3)


def test_token_ids_embed_like_their_text(models, decoder):
    for name, embedder in _embedders(models, decoder).items():
        ids = [embedder.encode_text(t) for t in TEXTS[:2]]
        by_ids = embedder.embed_sync(token_ids=ids)
        by_text = embedder.embed_sync(TEXTS[:2])
        assert np.allclose(by_ids.vectors, by_text.vectors, atol=1e-6), name


def test_dimensions_are_the_leading_ones_renormalised(models):
    bert = models["bert"]
    full = bert.embed_sync(TEXTS).vectors
    short = bert.embed_sync(TEXTS, dimensions=8).vectors
    assert short.shape == (len(TEXTS), 8)
    expected = full[:, :8] / np.linalg.norm(full[:, :8], axis=1, keepdims=True)
    assert np.allclose(short, expected, atol=1e-5)
    assert bert.embed_sync(TEXTS, dimensions=BERT_HIDDEN).vectors.shape[1] == BERT_HIDDEN
    with pytest.raises(EmbeddingError, match="between 1 and 32"):
        bert.embed_sync(TEXTS, dimensions=33)
    with pytest.raises(EmbeddingError, match="does not support matryoshka"):
        models["bert-cls"].embed_sync(TEXTS, dimensions=8)
    assert models["qwen3"].embed_sync(TEXTS, dimensions=16).vectors.shape[1] == 16
    with pytest.raises(EmbeddingError, match="supports dimensions 8, 16, not 12"):
        models["qwen3"].embed_sync(TEXTS, dimensions=12)


def test_inputs_past_the_models_limit_are_refused_or_cut(models):
    bert = models["bert"]
    long_text = " ".join(["cat"] * (BERT_MAX_POSITIONS + 10))
    with pytest.raises(EmbeddingError, match=r"input\[1\] is 76 tokens, over .* 64 tokens"):
        bert.embed_sync(["dog", long_text])
    cut = bert.embed_sync(["dog", long_text], truncate=True)
    assert cut.prompt_tokens == 3 + BERT_MAX_POSITIONS


@pytest.mark.parametrize(
    ("texts", "ids", "match"),
    [
        ([], None, "at least one input"),
        ([""], None, r"input\[0\] is an empty string"),
        (None, [], "at least one input"),
        (None, [[]], r"input\[0\] is empty"),
        (None, [[1, 2, 10**9]], "token id 1000000000, outside this model's vocabulary"),
        (None, [[3], [-1]], r"input\[1\] holds token id -1"),
        (["a"] * (service.MAX_INPUTS + 1), None, "over the 2048 one request may carry"),
    ],
)
def test_hostile_inputs_are_refused(models, texts, ids, match):
    with pytest.raises(EmbeddingError, match=match):
        models["bert"].embed_sync(texts, ids)


def test_a_request_past_the_token_budget_is_refused(models, monkeypatch):
    monkeypatch.setattr(service, "MAX_REQUEST_TOKENS", 20)
    with pytest.raises(EmbeddingError, match="over the 20 one request may carry"):
        models["bert"].embed_sync(TEXTS)


def test_batches_fit_the_row_and_token_budgets(monkeypatch):
    assert batches([3] * 64) == [list(range(64))]  # many short inputs: one forward pass
    assert [len(b) for b in batches([3] * 65)] == [64, 1]
    monkeypatch.setattr(service, "BATCH_TOKENS", 100)
    groups = batches([10, 60, 10, 30, 10])
    assert sorted(i for g in groups for i in g) == [0, 1, 2, 3, 4]
    lengths = [10, 60, 10, 30, 10]
    assert all(len(g) * max(lengths[i] for i in g) <= 100 for g in groups)


def test_rerankers_score_each_document_as_alone(models):
    query = "what is the capital of france"
    documents = ["paris is the capital of france", "a dog", "the weather is rain", "cats"]
    for name in ("cross", "xlmr-cross", "modernbert-cross", "yes-no"):
        reranker = models[name]
        assert isinstance(reranker, Reranker)
        scored = reranker.score_sync(query, documents)
        assert all(0.0 <= s <= 1.0 for s in scored.scores), name
        alone = [reranker.score_sync(query, [d]).scores[0] for d in documents]
        assert np.allclose(scored.scores, alone, atol=1e-5), name
        assert len(set(scored.scores)) == len(documents), name
        with pytest.raises(EmbeddingError, match="query is an empty string"):
            reranker.score_sync("", documents)
        with pytest.raises(EmbeddingError, match="at least one document"):
            reranker.score_sync(query, [])


def test_the_input_limit_never_passes_the_position_table(tmp_path):
    folder = write_bert_embedder(tmp_path / "bert")
    (folder / "sentence_bert_config.json").write_text('{"max_seq_length": 4096}')
    assert model_facts(folder).max_length == BERT_MAX_POSITIONS
    (folder / "sentence_bert_config.json").write_text('{"max_seq_length": 32}')
    assert model_facts(folder).max_length == 32


def test_the_cpu_gelu_is_exact_gelu_without_erf(models):
    x = mx.linspace(-8, 8, 4001)
    assert mx.abs(gelu_without_erf(x) - nn.gelu(x)).max().item() < 2e-6
    layers = [type(m).__name__ for _, m in models["bert"].model.named_modules()]
    assert "_ArithmeticGELU" in layers and "GELU" not in layers


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
def test_the_worker_runs_below_the_engines_priority():
    async def worker_nice() -> int:
        return await service.on_worker(lambda: os.getpriority(os.PRIO_PROCESS, 0))

    here = os.getpriority(os.PRIO_PROCESS, 0)
    assert asyncio.run(worker_nice()) == min(here + service.WORKER_NICE, 19)
    assert os.getpriority(os.PRIO_PROCESS, 0) == here  # this thread is left as it was


def test_concurrent_requests_share_forward_passes(models, monkeypatch):
    """Single-input requests that wait for the worker together are embedded together; each
    gets its own vector, and a bad one fails alone."""
    bert = models["bert"]
    passes: list[int] = []
    forward = bert.forward

    def counted(rows):
        passes.append(len(rows))
        return forward(rows)

    monkeypatch.setattr(bert, "forward", counted)
    alone = [bert.embed_sync([t]).vectors[0] for t in TEXTS]
    passes.clear()

    async def together():
        blocker = service.on_worker(lambda: time.sleep(0.3))  # the worker is busy meanwhile
        requests = [bert.embed([t]) for t in TEXTS] + [bert.embed([""])]
        results = await asyncio.gather(*requests, return_exceptions=True)
        await blocker
        return results

    results = asyncio.run(together())
    assert isinstance(results[-1], EmbeddingError)
    for i, result in enumerate(results[:-1]):
        assert np.allclose(result.vectors[0], alone[i], atol=1e-5), i
    assert passes == [len(TEXTS)]  # one forward pass for all of them
