"""POST /v1/chat/completions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...pipeline import ChatEvent, Prepared
from ...request import ContextLengthError
from ..errors import APIError, parse_body
from ..mcp.tool_loop import ToolLoopRun, call_budget
from ..ops.keepalive import OPENAI_KEEPALIVE
from ..serving import Lease, answer_with
from ..sse import sse_data, sse_response
from ..state import server_state
from ..streaming import generation_failed, unless_disconnected
from .choices import PieceOf, admitted, all_choices, check_n, seeded, streamed_choices, usage_of
from .convert import (
    CustomCalls,
    completion_body,
    context_error,
    delta_body,
    to_chat_request,
    with_give_up,
)
from .mcp import mcp_calls, mcp_options, with_mcp_tools
from .protocol import ChatCompletionRequest
from .stream import chat_logprobs, error_frames, new_id, now, openai_frames, usage_body


async def chat_completions(request: Request) -> Response:
    body = await parse_body(request, ChatCompletionRequest)
    return await answer_with(
        request,
        body.model,
        bool(body.stream),
        OPENAI_KEEPALIVE,
        lambda lease: _answer(request, body, lease),
    )


async def _answer(request: Request, body: ChatCompletionRequest, lease: Lease) -> Response:
    state = server_state(request)
    check_n(body.n)
    chat = await asyncio.to_thread(to_chat_request, body)
    custom = CustomCalls({t.name for t in chat.custom_tools})  # calls of custom tools
    mcp = mcp_options((body.model_extra or {}).get("mcp"))
    if mcp is not None and body.n > 1:
        raise APIError(400, "n > 1 cannot be combined with mcp tools", param="n")
    if mcp is not None:
        chat = with_mcp_tools(chat, state.mcp, mcp)
    # rendering and tokenizing take seconds on a huge prompt: off the event loop
    try:
        prepared = await asyncio.to_thread(lease.pipeline.prepare_chat, chat)  # invalid: 400
    except ContextLengthError as exc:
        raise context_error(exc) from None

    response_id, created, model = new_id("chatcmpl"), now(), lease.name

    def head() -> dict:
        return {
            "id": response_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
        }

    def chunk(choice_delta: dict, finish_reason: str | None = None, logprobs=None) -> dict:
        choice = {
            "index": 0,
            "delta": choice_delta,
            "logprobs": logprobs,
            "finish_reason": finish_reason,
        }
        return {**head(), "choices": [choice]}

    def usage_chunk(usage) -> dict:
        return {**head(), "choices": [], "usage": usage_body(usage)}

    def on_error(exc: Exception) -> list[str]:
        return error_frames(exc, lambda reason: chunk({}, reason))

    run = None
    if mcp is not None:  # the server runs MCP calls; the client sees the loop as one answer
        run = ToolLoopRun(
            lease.pipeline,
            chat,
            prepared,
            state.mcp,
            budget=call_budget(state.mcp, mcp.max_tool_calls),
        )
        if not body.stream:
            result = await unless_disconnected(request, run.result())
            out = completion_body(result, response_id, created, model, body.logprobs, custom)
            assert run.loop is not None
            out["mcp_calls"] = mcp_calls(run.loop)
            return JSONResponse(out)

    def prepare(index: int) -> Prepared:
        """Choice ``index``'s request (``n`` > 1): its own seed, constraint state, parser."""
        return lease.pipeline.prepare_chat(replace(chat, sampling=seeded(chat.sampling, index)))

    def event_chunk(event: ChatEvent, calls: CustomCalls = custom) -> dict | None:
        fields = delta_body(event.delta, calls)
        rest = calls.rest() if event.finish_reason is not None else []
        if rest:  # input a custom call has not streamed yet
            fields["tool_calls"] = [*fields.get("tool_calls", []), *rest]
        if not fields and event.finish_reason is None and not event.logprobs:
            return None
        logprobs = chat_logprobs(event.logprobs) if body.logprobs else None
        out = chunk(fields, event.finish_reason, logprobs)
        if run is not None and run.loop is not None and event.finish_reason is not None:
            out["mcp_calls"] = mcp_calls(run.loop)
        return with_give_up(out, event.constraint_gave_up)

    if body.stream and body.n > 1:
        pairs = await admitted(lease.pipeline, prepared, prepare, body.n)

        def piece_of(index: int) -> PieceOf:
            calls = CustomCalls(custom.names)  # each choice's own
            return lambda event: event_chunk(event, calls)

        n_frames = streamed_choices(
            pairs,
            piece_of,
            usage_chunk if body.include_usage else None,
            opening=chunk({"role": "assistant", "content": ""}),
        )
        return sse_response(n_frames, on_error)

    if body.stream:
        # admitted now: a full queue is a 429
        events = run.events() if run is not None else lease.pipeline.stream(prepared)

        async def frames() -> AsyncIterator[str]:
            yield sse_data(chunk({"role": "assistant", "content": ""}))
            async for frame in openai_frames(
                events,
                event_chunk,
                usage_chunk if body.include_usage else None,
            ):
                yield frame

        return sse_response(frames(), on_error)

    if body.n > 1:
        results = await unless_disconnected(
            request, all_choices(lease.pipeline, prepared, prepare, body.n)
        )
        bodies = [
            completion_body(r, response_id, created, model, body.logprobs, custom) for r in results
        ]
        whole = bodies[0]
        whole["choices"] = [{**b["choices"][0], "index": i} for i, b in enumerate(bodies)]
        whole["usage"] = usage_body(usage_of([r.usage for r in results]))
        return JSONResponse(whole)

    result = await unless_disconnected(request, lease.pipeline.complete(prepared))
    if result.finish_reason == "error":
        raise generation_failed(result.error)
    return JSONResponse(completion_body(result, response_id, created, model, body.logprobs, custom))
