"""The catalog's embedding and reranking models, loaded on first use, and the loaded chat
models as embedders (their hidden states pooled).

An embedding model is loaded once, in a thread (requests for others keep being served),
and stays loaded: it is small beside a chat model and has no engine to stop.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from pathlib import Path

from ..embeddings.decoders import DecoderEmbedder
from ..embeddings.kinds import ModelFacts, Pooling, model_facts
from ..embeddings.load import load_embedding_model
from ..embeddings.service import Embedder, EmbeddingError, Reranker
from ..pipeline import Pipeline
from .catalog import Entry

log = logging.getLogger(__name__)


class EmbeddingModels:
    def __init__(self) -> None:
        self._facts: dict[str, ModelFacts | None] = {}
        self._loaded: dict[str, Embedder | Reranker] = {}
        self._loading: dict[str, asyncio.Future[Embedder | Reranker]] = {}
        self._pooled: weakref.WeakKeyDictionary[Pipeline, dict[Pooling, DecoderEmbedder]] = (
            weakref.WeakKeyDictionary()
        )

    def facts(self, entry: Entry) -> ModelFacts | None:
        """What ``entry`` serves (None: a chat model), read once from its files."""
        if entry.name not in self._facts:
            path = Path(entry.spec)
            self._facts[entry.name] = model_facts(path) if path.is_dir() else None
        return self._facts[entry.name]

    def is_loaded(self, name: str) -> bool:
        return name in self._loaded

    async def model(self, entry: Entry) -> Embedder | Reranker:
        """``entry``'s embedder or reranker, loading it first (one load per model)."""
        found = self._loaded.get(entry.name)
        if found is not None:
            return found
        facts = self.facts(entry)
        assert facts is not None, "a chat model has no embedding model to load"
        task = self._loading.get(entry.name)
        if task is None:
            task = self._loading[entry.name] = asyncio.ensure_future(self._load(entry, facts))
        return await asyncio.shield(task)

    async def _load(self, entry: Entry, facts: ModelFacts) -> Embedder | Reranker:
        log.info("loading %s model %s from %s", facts.kind, entry.name, entry.spec)
        try:
            model = await asyncio.to_thread(
                load_embedding_model, entry.name, Path(entry.spec), facts
            )
        finally:
            del self._loading[entry.name]
        self._loaded[entry.name] = model
        return model

    def load_now(self, entry: Entry) -> None:
        """Load at start-up (``serve EMBEDDING_MODEL``), so the first request is fast."""
        facts = self.facts(entry)
        assert facts is not None
        self._loaded[entry.name] = load_embedding_model(entry.name, Path(entry.spec), facts)

    def pooled(self, name: str, pipeline: Pipeline, pooling: Pooling) -> DecoderEmbedder:
        """A chat model's pooled hidden states, on the model its engine runs."""
        by_pooling = self._pooled.setdefault(pipeline, {})
        if pooling not in by_pooling:
            model = getattr(pipeline.engine.source, "model", None)
            if model is None:
                raise EmbeddingError(f"model {name!r} runs no local model to embed with", "model")
            by_pooling[pooling] = DecoderEmbedder(
                name,
                model,
                pipeline.engine.tokenizer,
                vocab_size=pipeline.vocab_size,
                max_length=pipeline.context_length,
                pooling=pooling,
            )
        return by_pooling[pooling]
