"""The one seam between the embedding and rerank surfaces (OpenAI's ``/v1/embeddings``,
``/v1/rerank``, Ollama's ``/api/embed``) and the models: which model serves the request,
and the service's refusals as ``APIError`` 400s.

An id naming an embedding model or a reranker gets that model (loaded on first use); any
other id gets its chat model (the default for an unknown id, as chat requests do), whose
final hidden states are pooled (``pooling``: ``mean``, the default, or ``last``), leased
for the request like a chat request's.

    name, result = await embed(request, "bge-small", texts=["a", "b"], dimensions=256)
    result.vectors  # float32 [2, 256], unit rows; result.prompt_tokens
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.requests import Request

from ..embeddings.encoders import ModelUnsupported
from ..embeddings.kinds import Pooling
from ..embeddings.service import Embedder, EmbeddingError, Embeddings, Reranker, Scores
from ..fleet.catalog import Entry
from ..fleet.pool import Resolved
from .errors import APIError
from .serving import lease_of
from .state import server_state

_SERVES = {"embedding": "/v1/embeddings", "cross_encoder": "/v1/rerank"}


def _resolved(request: Request, model_id: str | None) -> Resolved:
    return server_state(request).models.resolve(model_id)


async def _loaded(request: Request, entry: Entry) -> Embedder | Reranker:
    try:
        return await server_state(request).embedders.model(entry)
    except ModelUnsupported as exc:
        raise APIError(400, f"model {entry.name!r}: {exc}", param="model") from None
    except Exception as exc:
        raise APIError(
            500, f"model {entry.name!r} failed to load: {exc}", code="model_load_failed"
        ) from None


async def embedder_for(
    request: Request, model_id: str | None, pooling: Pooling | None = None
) -> Embedder:
    """The embedder ``model_id`` resolves to (a 400 for a reranker's id)."""
    state = server_state(request)
    resolved = _resolved(request, model_id)
    entry = resolved.entry
    facts = state.embedders.facts(entry)
    if facts is None:
        lease = await lease_of(request, resolved)
        try:
            return state.embedders.pooled(lease.name, lease.pipeline, pooling or "mean")
        except EmbeddingError as exc:
            raise APIError(400, str(exc), param=exc.param) from None
    if facts.kind != "embedding":
        raise APIError(400, f"model {entry.name!r} is a reranker: use /v1/rerank", param="model")
    if pooling is not None and pooling != facts.pooling:
        raise APIError(
            400,
            f"model {entry.name!r} pools its own way ({facts.pooling}); leave out pooling",
            param="pooling",
        )
    model = await _loaded(request, entry)
    assert isinstance(model, Embedder)
    return model


async def reranker_for(request: Request, model_id: str | None) -> Reranker:
    """The reranker ``model_id`` resolves to (a 400 for any other model)."""
    entry = _resolved(request, model_id).entry
    facts = server_state(request).embedders.facts(entry)
    if facts is None or facts.kind == "embedding":
        kind = "an embedding model" if facts is not None else "a chat model"
        raise APIError(
            400,
            f"model {entry.name!r} is {kind}, not a reranker (a cross-encoder or a "
            "Qwen3-Reranker-style model)",
            param="model",
        )
    model = await _loaded(request, entry)
    assert isinstance(model, Reranker)
    return model


async def embed(
    request: Request,
    model_id: str | None,
    texts: Sequence[str] | None = None,
    token_ids: Sequence[Sequence[int]] | None = None,
    *,
    dimensions: int | None = None,
    truncate: bool = False,
    pooling: Pooling | None = None,
    param: str = "input",
) -> tuple[str, Embeddings]:
    """(the model's name, the embeddings of ``texts`` or ``token_ids``)."""
    embedder = await embedder_for(request, model_id, pooling)
    try:
        result = await embedder.embed(
            texts, token_ids, dimensions=dimensions, truncate=truncate, param=param
        )
    except EmbeddingError as exc:
        raise APIError(400, str(exc), param=exc.param) from None
    return embedder.name, result


async def rerank(
    request: Request, model_id: str | None, query: str, documents: Sequence[str]
) -> tuple[str, Scores]:
    """(the model's name, one relevance score per document in their order)."""
    reranker = await reranker_for(request, model_id)
    try:
        result = await reranker.score(query, documents)
    except EmbeddingError as exc:
        raise APIError(400, str(exc), param=exc.param) from None
    return reranker.name, result
