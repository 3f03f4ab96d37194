"""Which model serves a request, the one seam between the handlers and the model pool.

A handler parses its body, then ``answer_with(request, body.model, stream, idle, answer)``:
``answer(lease)`` is the rest of the handler, run with the pipeline of the model the id
resolves to (``lease.name`` is the id responses report). The id is resolved once, here
(``ModelPool.resolve``); the ``Resolved`` travels to the lease (``lease.resolved``), so
nothing downstream looks the id up again. The lease lasts until the response has ended.
When the model is loaded, that is all. When it must load first, a non-streamed request
waits; a streamed one starts its stream at once and sends keep-alives (``idle``: an SSE
comment, or Anthropic's ping) until the model is there, then the handler's own stream, so
proxies and clients do not drop a connection that is silent for the load's seconds.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ..embeddings.kinds import KIND_NAMES
from ..fleet.pool import Lease, ModelPool, Resolved
from .errors import APIError, api_error, is_anthropic_path
from .ops.keepalive import Idle, paced
from .ops.middleware import current_request
from .sse import sse_data, sse_response
from .state import server_state
from .streaming import unless_disconnected

Answer = Callable[[Lease], Awaitable[Response]]


async def lease_for(request: Request, model_id: str | None) -> Lease:
    """The lease of the chat model ``model_id`` names, for a handler that never streams."""
    return await lease_of(
        request, _chat_model(request, server_state(request).models.resolve(model_id))
    )


async def lease_of(request: Request, resolved: Resolved) -> Lease:
    """The resolved model's lease, loaded if it was not (a waiting request still stops at
    its deadline or when its client leaves)."""
    pool: ModelPool = server_state(request).models
    if pool.is_ready(resolved):
        return _held(await pool.acquire(resolved))
    return await unless_disconnected(request, _acquired(pool, resolved))


def _chat_model(request: Request, resolved: Resolved) -> Resolved:
    """``resolved``, unless it is an embedding model or a reranker (a 400 naming its route)."""
    facts = server_state(request).embedders.facts(resolved.entry)
    if facts is not None:
        route = "/v1/embeddings" if facts.kind == "embedding" else "/v1/rerank"
        raise APIError(
            400, f"model {resolved.name!r} is {KIND_NAMES[facts.kind]}: use {route}", param="model"
        )
    return resolved


async def _acquired(pool: ModelPool, resolved: Resolved) -> Lease:
    # released by the request's end even if the waiter was given up as the lease came
    return _held(await pool.acquire(resolved))


def _held(lease: Lease) -> Lease:
    current_request().on_close(lease.release)
    return lease


async def answer_with(
    request: Request, model_id: str | None, stream: bool, idle: str, answer: Answer
) -> Response:
    """``answer`` with the model's lease; a stream that must wait for a load waits inside
    its own response, with keep-alives. ``model_id`` is resolved here, once: the lease
    carries the result (``lease.resolved``)."""
    pool: ModelPool = server_state(request).models
    resolved = _chat_model(request, pool.resolve(model_id))
    if pool.is_ready(resolved) or not stream:
        return await answer(await lease_of(request, resolved))
    path = request.url.path
    return sse_response(
        _after_load(request, resolved, idle, answer), lambda exc: late_error(path, exc)
    )


async def _after_load(
    request: Request, resolved: Resolved, idle: str, answer: Answer
) -> AsyncIterator[str]:
    context = current_request()

    async def leased() -> AsyncGenerator[Lease, None]:
        yield await _acquired(server_state(request).models, resolved)

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
    error = api_error(exc)
    if is_anthropic_path(path):
        return [sse_data(error.anthropic_body(), event="error")]
    if path.startswith("/v1/responses"):
        body = {"type": "error", "code": error.code, "message": error.message}
        return [sse_data({**body, "param": error.param, "sequence_number": 0}, event="error")]
    return [sse_data(error.openai_body()), "data: [DONE]\n\n"]
