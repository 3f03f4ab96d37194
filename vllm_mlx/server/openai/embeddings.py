"""POST /v1/embeddings in OpenAI's shape: ``input`` as a string, a list of strings, a
token-id array or a list of them; ``encoding_format`` float or base64; ``dimensions``
(matryoshka models only). ``pooling`` (``mean``/``last``) chooses how a chat model's hidden
states are pooled, like llama.cpp's ``--pooling``."""

from __future__ import annotations

import asyncio
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response

from ...embeddings.service import Embeddings
from ..embedding_service import embed
from ..errors import parse_body


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    input: str | list[str] | list[int] | list[list[int]]
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None
    pooling: Literal["mean", "last"] | None = None


async def embeddings(request: Request) -> Response:
    body = await parse_body(request, EmbeddingRequest)
    texts, token_ids = _inputs(body.input)
    name, result = await embed(
        request,
        body.model,
        texts,
        token_ids,
        dimensions=body.dimensions,
        pooling=body.pooling,
    )
    # a long list of floats takes a while to write: not on the event loop
    content = await asyncio.to_thread(_rendered, name, result, body.encoding_format)
    return Response(content, media_type="application/json")


def _inputs(given: object) -> tuple[list[str] | None, list[list[int]] | None]:
    """(texts, token ids): exactly one is set."""
    if isinstance(given, str):
        return [given], None
    assert isinstance(given, list)
    if given and isinstance(given[0], int):
        return None, [given]
    if given and isinstance(given[0], list):
        return None, given
    return given, None


def _rendered(name: str, result: Embeddings, encoding: str) -> bytes:
    data = [
        {
            "object": "embedding",
            "index": i,
            "embedding": result.base64(i) if encoding == "base64" else row.tolist(),
        }
        for i, row in enumerate(result.vectors)
    ]
    usage = {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens}
    body = {"object": "list", "data": data, "model": name, "usage": usage}
    return json.dumps(body, separators=(",", ":")).encode()
