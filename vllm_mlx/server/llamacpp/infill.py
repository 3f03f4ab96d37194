"""POST /infill: llama.cpp's fill-in-the-middle route (the shape llama.vscode and other
editor plugins send), answered in llama.cpp's ``/completion`` shape: ``content``, ``stop``,
``stop_type`` (``eos`` | ``limit`` | ``word``), token counts. Streamed, each piece is an SSE
``data:`` line and the last has ``stop: true``; a failure midway ends the stream with an
``error`` object. The prompt is the model's own FIM tokens (``Pipeline.prepare_infill``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...pipeline import ChatEvent, Usage
from ...request import ContextLengthError, Infill, RequestError
from ..errors import APIError, api_error, parse_body
from ..ops.keepalive import OPENAI_KEEPALIVE
from ..serving import Lease, lease_for
from ..sse import sse_data, sse_response
from ..streaming import event_frames, generation_failed, unless_disconnected
from .protocol import InfillRequest


async def infill(request: Request) -> Response:
    body = await parse_body(request, InfillRequest)
    lease = await lease_for(request, body.model)
    fill = Infill(
        prefix=body.input_prefix,
        suffix=body.input_suffix,
        prompt=body.prompt,
        extra=[(f.filename, f.text) for f in body.input_extra],
    )
    try:
        prepared = await asyncio.to_thread(
            lease.pipeline.prepare_infill, fill, body.sampling(), body.limit()
        )
    except ContextLengthError as exc:
        raise APIError(
            400,
            f"the request ({exc.prompt_tokens} prompt tokens) exceeds the available context "
            f"size ({exc.context_length} tokens)",
        ) from None
    except RequestError as exc:
        param = "input_suffix" if exc.param == "suffix" else exc.param
        raise APIError(400, str(exc), param=param) from None
    events = lease.pipeline.stream(prepared)  # admitted now: a full queue is a 429
    if body.stream:
        return sse_response(_frames(events, lease), _error)
    result = await unless_disconnected(request, lease.pipeline.complete(prepared))
    if result.finish_reason == "error":
        raise generation_failed(result.error)
    content = result.message.content or ""
    return JSONResponse(
        _final(lease, content, result.finish_reason, result.stop_reason, result.usage)
    )


def _piece(lease: Lease, content: str) -> dict:
    return {"index": 0, "content": content, "tokens": [], "stop": False, "model": lease.name}


def _final(
    lease: Lease, content: str, finish: str | None, stop: str | int | None, usage: Usage | None
) -> dict:
    usage = usage or Usage()
    word = stop if isinstance(stop, str) else ""
    kind = "limit" if finish == "length" else "word" if word else "eos"
    return {
        **_piece(lease, content),
        "stop": True,
        "stop_type": kind,
        "stopping_word": word,
        "tokens_predicted": usage.completion_tokens,
        "tokens_evaluated": usage.prompt_tokens,
        "tokens_cached": usage.cached_tokens,
        "truncated": False,
    }


async def _frames(events: AsyncGenerator[ChatEvent, None], lease: Lease) -> AsyncIterator[str]:
    def on_event(event: ChatEvent) -> list[str]:
        if not event.delta.content or event.finish_reason is not None:
            return []  # the last piece's text goes with the final object
        return [sse_data(_piece(lease, event.delta.content))]

    def on_finish(event: ChatEvent) -> list[str]:
        final = _final(
            lease, event.delta.content, event.finish_reason, event.stop_reason, event.usage
        )
        return [sse_data(final)]

    async for frame in event_frames(events, OPENAI_KEEPALIVE, on_event, on_finish):
        yield frame


def _error(exc: Exception) -> list[str]:
    return [sse_data(api_error(exc).llama_cpp_body())]
