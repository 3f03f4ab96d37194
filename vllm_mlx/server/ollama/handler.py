"""POST /api/chat and POST /api/generate (Ollama's API).

Errors raised here are rendered in Ollama's shape (``{"error": "..."}``) by the app, because
of the path. The model's lease is taken before the reply starts (Ollama sends nothing while
a model loads either), so a refused request is an HTTP error, and a stream that fails
later ends with an error line. ``keep_alive`` sets how long the model stays loaded once
idle, from this request on.
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...fleet.pool import Lease
from ...pipeline import Prepared
from ...request import ContextLengthError, Infill
from ..errors import parse_body
from ..serving import lease_for
from ..state import server_state
from ..streaming import unless_disconnected
from .convert import (
    chat_request,
    check_generate,
    context_error,
    format_constraint,
    generate_request,
    keep_alive_seconds,
    max_tokens_of,
    sampling_of,
)
from .protocol import ChatBody, GenerateBody, GenerationFields, Options
from .stream import Kind, Reply, Timer, created_at, error_lines, ndjson_response


def model_id(request: Request, name: str | None) -> str | None:
    """Ollama's names carry a tag (``smollm2:latest``): ``:latest`` is the name itself."""
    catalog = server_state(request).models.catalog
    if name and catalog.lookup(name) is None and name.endswith(":latest"):
        return name.removesuffix(":latest")
    return name or None


async def chat(request: Request) -> Response:
    timer = Timer()
    body = await parse_body(request, ChatBody)
    if not body.messages:
        return await _load_only(request, body, "chat", timer)
    lease = await _leased(request, body, timer)
    chat_body = await asyncio.to_thread(chat_request, body)
    prepared = await _prepared(lease.pipeline.prepare_chat, chat_body)
    reply = Reply(lease.name, "chat", timer, logprobs=body.logprobs)
    return await _reply(request, body, lease, prepared, reply)


async def generate(request: Request) -> Response:
    timer = Timer()
    body = await parse_body(request, GenerateBody)
    check_generate(body)
    if not body.prompt and not body.suffix:
        return await _load_only(request, body, "generate", timer)
    lease = await _leased(request, body, timer)
    options = body.options or Options()
    if body.suffix:  # fill-in-the-middle, in the model's own FIM tokens
        infill = Infill(prefix=body.prompt, suffix=body.suffix)
        prepared = await _prepared(
            lease.pipeline.prepare_infill,
            infill,
            sampling_of(body),
            max_tokens_of(options),
            max_tokens_policy="cap",
            context_limit=options.num_ctx,
        )
    elif body.raw:
        prepared = await _prepared(
            lease.pipeline.prepare_completion,
            body.prompt,
            sampling_of(body),
            max_tokens_of(options),
            format_constraint(body.format),
            max_tokens_policy="cap",
            context_limit=options.num_ctx,
        )
    else:
        chat_body = await asyncio.to_thread(generate_request, body)
        prepared = await _prepared(lease.pipeline.prepare_chat, chat_body)
    reply = Reply(lease.name, "generate", timer, logprobs=body.logprobs)
    return await _reply(request, body, lease, prepared, reply)


async def _leased(request: Request, body: GenerationFields, timer: Timer) -> Lease:
    keep = keep_alive_seconds(body.keep_alive)  # a bad duration is a 400 before any load
    lease = await lease_for(request, model_id(request, body.model))
    timer.mark_loaded()
    if body.keep_alive is not None:
        lease.keep_alive(keep)
    return lease


async def _prepared(prepare, *args, **kwargs) -> Prepared:
    """Rendering, tokenizing and compiling grammars take seconds on a huge prompt: off the
    event loop; a prompt past the context in Ollama's words."""
    try:
        return await asyncio.to_thread(prepare, *args, **kwargs)
    except ContextLengthError as exc:
        raise context_error(exc) from None


async def _reply(
    request: Request, body: GenerationFields, lease: Lease, prepared: Prepared, reply: Reply
) -> Response:
    events = lease.pipeline.stream(prepared)  # admitted now: a full queue is a 429
    if body.stream:
        return ndjson_response(reply.lines(events), error_lines)
    return JSONResponse(await unless_disconnected(request, reply.collect(events)))


async def _load_only(request: Request, body: GenerationFields, kind: Kind, timer: Timer):
    """No prompt: load the model (``done_reason: load``), or with ``keep_alive: 0`` unload
    it once idle (``unload``), as Ollama does."""
    keep = keep_alive_seconds(body.keep_alive)
    pool = server_state(request).models
    if keep == 0:
        entry = pool.resolve(model_id(request, body.model)).entry
        pool.expire(entry.name)
        name, reason = entry.name, "unload"
    else:
        lease = await _leased(request, body, timer)
        name, reason = lease.name, "load"
    done = Reply(name, kind, timer).piece()
    done.update({"created_at": created_at(), "done": True, "done_reason": reason})
    return JSONResponse(done)
