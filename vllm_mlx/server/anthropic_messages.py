"""POST /v1/messages and POST /v1/messages/count_tokens (Anthropic Messages API).

Any model id is accepted (Claude Code sends its own) and the served name is reported.
Errors raised here are rendered in Anthropic's shape by the app, because of the path.
"""

from __future__ import annotations

import uuid

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..chat.template import ChatTemplateError, render_chat
from ..pipeline import ChatRequest, ChatResult, Prepared
from .anthropic_convert import content_blocks, stop_reason, to_chat_request, usage_body
from .anthropic_protocol import MessagesRequest, PromptFields
from .anthropic_stream import MessageStream
from .errors import APIError, parse_body
from .openai_common import generation_failed, unless_disconnected
from .sse import sse_response
from .state import ServerState, server_state


async def create_message(request: Request) -> Response:
    state = server_state(request)
    body = await parse_body(request, MessagesRequest)
    prepared = prepare(state, to_chat_request(body, state.defaults), body.max_tokens)
    message_id = "msg_" + uuid.uuid4().hex[:24]
    model = state.served_model_name

    if body.stream:
        stream = MessageStream(message_id, model, len(prepared.generation.prompt_tokens))

        async def frames():
            for out in stream.start():
                yield out
            async for out in stream.frames(state.pipeline.stream(prepared)):
                yield out

        return sse_response(frames(), stream.error)

    result = await unless_disconnected(request, state.pipeline.complete(prepared))
    if result.finish_reason == "error":
        raise generation_failed(result.error)
    return JSONResponse(message_body(result, message_id, model))


async def count_tokens(request: Request) -> Response:
    """The prompt's token count, rendered exactly as /v1/messages would render it (but
    without building constraints or checking the context, which counting does not need)."""
    state = server_state(request)
    body = await parse_body(request, PromptFields)
    chat = to_chat_request(body, state.defaults)
    tools = chat.tools if chat.tool_choice != "none" else None
    try:
        prompt = render_chat(
            state.pipeline.tokenizer,
            chat.messages,
            tools=tools,
            template_kwargs=chat.template_kwargs,
        )
    except ChatTemplateError as exc:
        raise APIError(400, str(exc)) from None
    return JSONResponse({"input_tokens": len(prompt.token_ids)})


def prepare(state: ServerState, chat: ChatRequest, max_tokens: int) -> Prepared:
    """Validate and render; ``max_tokens`` is fitted to the context the prompt leaves."""
    prepared = state.pipeline.prepare_chat(chat)  # invalid requests: 400 (app.py)
    room = state.pipeline.context_length - len(prepared.generation.prompt_tokens)
    prepared.generation.params.max_tokens = min(max_tokens, room)
    return prepared


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
    }
