"""POST /v1/rerank and /rerank in the Cohere/Jina shape vLLM and llama.cpp serve: a query,
documents (strings or ``{"text": ...}``), ``top_n``, ``return_documents``; results sorted
by ``relevance_score``, each with its document's ``index``."""

from __future__ import annotations

import uuid

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse

from .embedding_service import rerank as rerank_documents
from .errors import parse_body


class _Document(BaseModel):
    model_config = ConfigDict(extra="allow")

    text: str


class RerankRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    query: str
    documents: list[str | _Document]
    model: str | None = None
    top_n: int | None = Field(default=None, ge=0)  # None or 0: every document
    return_documents: bool = True


async def rerank(request: Request) -> JSONResponse:
    body = await parse_body(request, RerankRequest)
    texts = [d if isinstance(d, str) else d.text for d in body.documents]
    name, scored = await rerank_documents(request, body.model, body.query, texts)
    order = sorted(range(len(texts)), key=lambda i: -scored.scores[i])
    if body.top_n:
        order = order[: body.top_n]
    results = []
    for index in order:
        result: dict = {"index": index, "relevance_score": scored.scores[index]}
        if body.return_documents:
            result["document"] = {"text": texts[index]}
        results.append(result)
    return JSONResponse(
        {
            "id": f"rerank-{uuid.uuid4().hex}",
            "model": name,
            "results": results,
            "usage": {"prompt_tokens": scored.prompt_tokens, "total_tokens": scored.prompt_tokens},
        }
    )
