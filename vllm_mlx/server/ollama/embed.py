"""POST /api/embed and POST /api/embeddings (Ollama's older route) through the server's
embedding service: an embedding model's id gets that model, a chat model's id its pooled
hidden states (``server/embedding_service.py``). Vectors are unit length, as Ollama's
/api/embed returns them; ``truncate`` (Ollama's default: true) cuts inputs past the model's
limit instead of refusing them."""

from __future__ import annotations

import asyncio
import json

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response

from ..embedding_service import embed as embedded
from ..errors import parse_body
from .convert import keep_alive_seconds
from .handler import model_id
from .protocol import Options
from .stream import Timer


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class EmbedBody(_Lenient):
    model: str | None = None
    input: str | list[str] = Field(default_factory=list)
    truncate: bool = True
    dimensions: int | None = Field(default=None, ge=1)
    options: Options | None = None
    keep_alive: float | str | None = None


class EmbeddingsBody(_Lenient):
    model: str | None = None
    prompt: str = ""
    options: Options | None = None
    keep_alive: float | str | None = None


def _json(body: dict) -> Response:
    return Response(json.dumps(body, separators=(",", ":")), media_type="application/json")


async def embed(request: Request) -> Response:
    timer = Timer()
    body = await parse_body(request, EmbedBody)
    keep_alive_seconds(body.keep_alive)  # checked as on every route; models stay per the server
    if isinstance(body.input, str):
        texts = [body.input] if body.input else []
    else:
        texts = list(body.input)
    if not texts:
        return _json({"model": body.model or "", "embeddings": []})
    name, result = await embedded(
        request,
        model_id(request, body.model),
        texts,
        dimensions=body.dimensions,
        truncate=body.truncate,
    )
    timer.mark_loaded()
    counters = timer.counters(None)
    out = {
        "model": name,
        "embeddings": result.vectors.tolist(),
        "total_duration": counters["total_duration"],
        "load_duration": 0,
        "prompt_eval_count": result.prompt_tokens,
    }
    return Response(
        await asyncio.to_thread(json.dumps, out, separators=(",", ":")),
        media_type="application/json",
    )


async def embeddings(request: Request) -> Response:
    body = await parse_body(request, EmbeddingsBody)
    keep_alive_seconds(body.keep_alive)
    if not body.prompt:
        return _json({"embedding": []})
    _, result = await embedded(
        request, model_id(request, body.model), [body.prompt], truncate=True, param="prompt"
    )
    return _json({"embedding": result.vectors[0].tolist()})
