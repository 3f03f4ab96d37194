"""POST /v1/messages and POST /v1/messages/count_tokens (Anthropic Messages API).

Any model id is accepted (Claude Code sends its own) and the served name is reported.
Errors raised here are rendered in Anthropic's shape by the app, because of the path.
"""

from __future__ import annotations

import asyncio
import uuid

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...pipeline import ChatResult
from ...request import ContextLengthError
from ..errors import parse_body
from ..ops.keepalive import ANTHROPIC_PING
from ..serving import Lease, answer_with, lease_for
from ..sse import sse_response
from ..streaming import generation_failed, unless_disconnected
from .convert import content_blocks, context_error, stop_reason, to_chat_request, usage_body
from .protocol import MessagesRequest, PromptFields
from .stream import MessageStream


async def create_message(request: Request) -> Response:
    body = await parse_body(request, MessagesRequest)
    return await answer_with(
        request,
        body.model,
        bool(body.stream),
        ANTHROPIC_PING,
        lambda lease: _answer(request, body, lease),
    )


async def _answer(request: Request, body: MessagesRequest, lease: Lease) -> Response:
    # converting, rendering and tokenizing a huge prompt take seconds: off the event loop
    chat = await asyncio.to_thread(to_chat_request, body)
    try:
        prepared = await asyncio.to_thread(lease.pipeline.prepare_chat, chat)  # invalid: 400
    except ContextLengthError as exc:
        raise context_error(exc) from None
    message_id = "msg_" + uuid.uuid4().hex[:24]
    model = lease.name

    if body.stream:
        stream = MessageStream(message_id, model, len(prepared.generation.prompt_tokens))

        events = lease.pipeline.stream(prepared)  # admitted now: a full queue is a 429

        return sse_response(stream.frames(events), stream.error)

    result = await unless_disconnected(request, lease.pipeline.complete(prepared))
    if result.finish_reason == "error":
        raise generation_failed(result.error)
    return JSONResponse(message_body(result, message_id, model))


async def count_tokens(request: Request) -> Response:
    """The prompt's token count, rendered by the pipeline exactly as /v1/messages renders
    it (thinking switch included), without building constraints or fitting the context."""
    body = await parse_body(request, PromptFields)
    lease = await lease_for(request, body.model)
    chat = await asyncio.to_thread(to_chat_request, body)
    prompt, _ = await asyncio.to_thread(lease.pipeline.render, chat)  # template errors: 400
    return JSONResponse({"input_tokens": len(prompt.token_ids)})


def message_body(result: ChatResult, message_id: str, model: str) -> dict:
    reason, sequence = stop_reason(result.finish_reason, result.stop_reason)
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content_blocks(result.message),
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage_body(result.usage),
        **({"constraint_gave_up": result.constraint_gave_up} if result.constraint_gave_up else {}),
    }
