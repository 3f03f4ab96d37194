"""Which model serves a request, the one seam between the handlers and the model pool.

A handler parses its body, then ``answer_with(request, body.model, stream, idle, answer)``:
``answer(lease)`` is the rest of the handler, run with the pipeline of the model the id
resolves to (``lease.name`` is the id responses report). The lease lasts until the response
has ended. When the model is loaded, that is all. When it must load first, a non-streamed
request waits; a streamed one starts its stream at once and sends keep-alives (``idle``: an
SSE comment, or Anthropic's ping) until the model is there, then the handler's own stream,
so proxies and clients do not drop a connection that is silent for the load's seconds.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ..chat.template import ChatTemplateError
from ..embeddings.kinds import KIND_NAMES
from ..engine.engine import QueueFullError
from ..fleet.catalog import Entry
from ..fleet.pool import (
    AdapterRefused,
    Lease,
    ModelBusy,
    ModelLoadFailed,
    ModelPool,
    ModelTooLarge,
    PoolFull,
    UnknownModel,
)
from ..request import RequestError
from .errors import APIError, is_anthropic_path
from .ops.keepalive import Idle, paced
from .ops.middleware import current_request
from .sse import sse_data, sse_response
from .state import server_state
from .streaming import unless_disconnected

Answer = Callable[[Lease], Awaitable[Response]]
RETRY_AFTER_S = "5"


def pool_error(exc: Exception) -> APIError:
    """The pool's refusals in the APIs' terms."""
    if isinstance(exc, UnknownModel):
        return APIError(404, str(exc), param="model", code="model_not_found")
    if isinstance(exc, PoolFull):
        return APIError(
            503, str(exc), code="model_capacity", headers={"Retry-After": RETRY_AFTER_S}
        )
    if isinstance(exc, ModelTooLarge):
        return APIError(503, str(exc), code="model_too_large")
    if isinstance(exc, ModelBusy):
        return APIError(409, str(exc), code="model_busy")
    if isinstance(exc, AdapterRefused):
        return APIError(400, str(exc), param="model", code="invalid_adapter")
    return APIError(500, str(exc), code="model_load_failed")


POOL_ERRORS = (UnknownModel, PoolFull, ModelTooLarge, ModelBusy, ModelLoadFailed, AdapterRefused)


async def lease_for(request: Request, model_id: str | None) -> Lease:
    """The lease of the model ``model_id`` resolves to, loaded if it was not (a waiting
    request still stops at its deadline or when its client leaves)."""
    pool: ModelPool = server_state(request).models
    try:
        entry = _chat_model(request, pool.resolve(model_id))
        if pool.is_ready(entry):
            return _held(await pool.acquire(entry))
        return await unless_disconnected(request, _acquired(pool, model_id))
    except POOL_ERRORS as exc:
        raise pool_error(exc) from None


def _chat_model(request: Request, entry: Entry) -> Entry:
    """``entry``, unless it is an embedding model or a reranker (a 400 naming its route)."""
    facts = server_state(request).embedders.facts(entry)
    if facts is not None:
        route = "/v1/embeddings" if facts.kind == "embedding" else "/v1/rerank"
        raise APIError(
            400, f"model {entry.name!r} is {KIND_NAMES[facts.kind]}: use {route}", param="model"
        )
    return entry


async def _acquired(pool: ModelPool, model_id: str | None) -> Lease:
    # released by the request's end even if the waiter was given up as the lease came
    return _held(await pool.acquire(pool.resolve(model_id)))


def _held(lease: Lease) -> Lease:
    current_request().on_close(lease.release)
    return lease


async def answer_with(
    request: Request, model_id: str | None, stream: bool, idle: str, answer: Answer
) -> Response:
    """``answer`` with the model's lease; a stream that must wait for a load waits inside
    its own response, with keep-alives."""
    pool: ModelPool = server_state(request).models
    try:
        ready = pool.is_ready(_chat_model(request, pool.resolve(model_id)))
    except UnknownModel as exc:
        raise pool_error(exc) from None
    if ready or not stream:
        return await answer(await lease_for(request, model_id))
    path = request.url.path
    return sse_response(
        _after_load(request, model_id, idle, answer), lambda exc: late_error(path, exc)
    )


async def _after_load(
    request: Request, model_id: str | None, idle: str, answer: Answer
) -> AsyncIterator[str]:
    context = current_request()

    async def leased() -> AsyncGenerator[Lease, None]:
        yield await _acquired(server_state(request).models, model_id)

    lease = None
    waiting = paced(
        leased(), interval=context.keepalive, deadline=context.deadline, timeout=context.timeout
    )
    async with aclosing(waiting) as items:
        async for item in items:
            if isinstance(item, Idle):
                yield idle
            else:
                lease = item
    assert lease is not None
    response = await answer(lease)
    assert isinstance(response, StreamingResponse), "a streamed request answers with a stream"
    async for chunk in response.body_iterator:
        yield chunk if isinstance(chunk, str) else bytes(chunk).decode("utf-8")


def late_error(path: str, exc: Exception) -> list[str]:
    """What ends a stream that failed before the handler's own stream began (a load that
    failed, a request the model's pipeline refused): the API's error event."""
    error = as_api_error(exc)
    if is_anthropic_path(path):
        return [sse_data(error.anthropic_body(), event="error")]
    if path.startswith("/v1/responses"):
        body = {"type": "error", "code": error.code, "message": error.message}
        return [sse_data({**body, "param": error.param, "sequence_number": 0}, event="error")]
    return [sse_data(error.openai_body()), "data: [DONE]\n\n"]


def as_api_error(exc: Exception) -> APIError:
    """The error the app's exception handlers would have answered with."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, POOL_ERRORS):
        return pool_error(exc)
    if isinstance(exc, RequestError | ChatTemplateError):
        return APIError(400, str(exc), param=getattr(exc, "param", None))
    if isinstance(exc, QueueFullError):
        return APIError(429, f"server is busy: {exc}")
    return APIError(500, f"internal error: {exc}")
