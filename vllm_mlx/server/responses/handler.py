"""POST /v1/responses and GET /v1/responses/{id} (OpenAI Responses API).

Any model id is accepted (Codex sends its own) and the served name is reported. Everything
that can fail with 400/404 (bad items, unknown ``previous_response_id``, bad schema) fails
before a stream starts; after that a stream always ends with its terminal event.
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...chat.template_kwargs import ChatTemplateError
from ...request import ContextLengthError, RequestError
from ..errors import APIError, parse_body
from ..ops.keepalive import OPENAI_KEEPALIVE
from ..serving import Lease, answer_with
from ..sse import sse_response
from ..state import server_state
from ..streaming import generation_failed, unless_disconnected
from .convert import (
    assistant_message,
    context_error,
    custom_tool_names,
    input_messages,
    output_items,
    status_of,
    to_chat_request,
    wants_encrypted_reasoning,
)
from .mcp import MCPResponseRun
from .mcp_tools import MCPSelection, select_mcp_tools
from .object import ResponseObject
from .protocol import ResponsesRequest
from .store import ResponseStore, StoredResponse
from .stream import ResponseStream

# Request fields whose errors the pipeline reports under chat-completions names.
_PARAMS = {
    "response_format": "text.format",
    "messages": "input",
    "max_tokens": "max_output_tokens",
    "reasoning_effort": "reasoning.effort",
}


def response_store(request: Request) -> ResponseStore:
    """The app's store, made on first use (one per app, so test servers do not share)."""
    app_state = request.app.state
    if not hasattr(app_state, "responses_store"):
        max_bytes = server_state(request).responses_store_bytes
        app_state.responses_store = ResponseStore(max_bytes=max_bytes)
    return app_state.responses_store


async def create_response(request: Request) -> Response:
    store = response_store(request)
    body = await parse_body(request, ResponsesRequest)
    history: list[dict] = []
    if body.previous_response_id is not None:
        previous = store.get(body.previous_response_id)
        if previous is None:
            raise APIError(
                404,
                f"no stored response with id {body.previous_response_id!r}",
                param="previous_response_id",
            )
        history = previous.conversation
    mcp = select_mcp_tools(body.tools, server_state(request).mcp)
    if mcp is not None:
        body.tool_choice = mcp.tool_choice(body.tool_choice)
    return await answer_with(
        request,
        body.model,
        bool(body.stream),
        OPENAI_KEEPALIVE,
        lambda lease: _answer(request, body, history, mcp, lease),
    )


async def _answer(
    request: Request,
    body: ResponsesRequest,
    history: list[dict],
    mcp: MCPSelection | None,
    lease: Lease,
) -> Response:
    state, store = server_state(request), response_store(request)
    chat, conversation = await asyncio.to_thread(
        to_chat_request, body, history, mcp.tools if mcp is not None else None
    )
    try:  # rendering and tokenizing a huge prompt take seconds: off the event loop
        prepared = await asyncio.to_thread(lease.pipeline.prepare_chat, chat)
    except ContextLengthError as exc:
        raise context_error(exc) from None
    except (RequestError, ChatTemplateError) as exc:
        param = getattr(exc, "param", None)
        raise APIError(400, str(exc), param=_PARAMS.get(param or "", param)) from None
    response = ResponseObject(body, lease.name)

    def keep(final: dict | None) -> None:
        if body.store and final is not None and final["status"] in ("completed", "incomplete"):
            # MCP calls replay as the assistant's tool calls and their results
            output = final["output"]
            turn = input_messages(output) if mcp is not None else [assistant_message(output)]
            store.put(response.id, StoredResponse(final, conversation + turn))

    if mcp is not None:
        run = MCPResponseRun(
            state,
            lease.pipeline,
            chat,
            prepared,
            mcp,
            ResponseStream(response),
            body.max_tool_calls,
        )
        if body.stream:

            async def mcp_frames():
                for out in run.stream.start():
                    yield out
                async for out in run.frames():
                    yield out
                keep(run.stream.final)

            return sse_response(mcp_frames(), run.stream.failed)

        async def the_same_frames() -> None:  # the stream's frames, unsent: equal by construction
            async for _ in run.frames():
                pass

        await unless_disconnected(request, the_same_frames())
        keep(run.stream.final)
        return JSONResponse(run.stream.final)

    if body.stream:
        stream = ResponseStream(response)

        events = lease.pipeline.stream(prepared)  # admitted now: a full queue is a 429

        async def frames():
            for out in stream.start():
                yield out
            async for out in stream.frames(events):
                yield out
            keep(stream.final)

        return sse_response(frames(), stream.failed)

    result = await unless_disconnected(request, lease.pipeline.complete(prepared))
    status, details = status_of(result.finish_reason)
    if status == "failed":
        raise generation_failed(result.error)
    final = response.body(
        status,
        output_items(result.message, custom_tool_names(body), wants_encrypted_reasoning(body)),
        result.usage,
        incomplete_details=details,
        constraint_gave_up=result.constraint_gave_up,
    )
    keep(final)
    return JSONResponse(final)


async def get_response(request: Request) -> Response:
    entry = response_store(request).get(request.path_params["response_id"])
    if entry is None:
        raise APIError(404, f"no stored response with id {request.path_params['response_id']!r}")
    return JSONResponse(entry.body)
