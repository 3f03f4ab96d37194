"""POST /v1/chat/completions."""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..families.message import MessageDelta, ToolCallDelta
from ..pipeline import ChatEvent, ChatRequest, ChatResult
from .errors import APIError, parse_body
from .mcp_chat import mcp_options, run_mcp_chat
from .openai_common import (
    chat_logprobs,
    error_frames,
    generation_failed,
    new_id,
    now,
    openai_frames,
    unless_disconnected,
    usage_body,
)
from .openai_protocol import ChatCompletionRequest, ChatMessage
from .sse import sse_data, sse_response
from .state import server_state


async def chat_completions(request: Request) -> Response:
    state = server_state(request)
    body = await parse_body(request, ChatCompletionRequest)
    chat = to_chat_request(body, state.defaults)
    prepared = state.pipeline.prepare_chat(chat)  # invalid requests: 400 (app.py)

    response_id, created, model = new_id("chatcmpl"), now(), state.served_model_name

    def chunk(choice_delta: dict, finish_reason: str | None = None, logprobs=None) -> dict:
        return {
            "id": response_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "delta": choice_delta,
                    "logprobs": logprobs,
                    "finish_reason": finish_reason,
                }
            ],
        }

    mcp = mcp_options((body.model_extra or {}).get("mcp"))
    if mcp is not None:
        result, calls = await run_mcp_chat(state, chat, mcp)
        if body.stream:
            return sse_response(
                _result_frames(result, response_id, created, model, body.include_usage),
                lambda exc: error_frames(exc, lambda r: chunk({}, r)),
            )
        out = completion_body(result, response_id, created, model, body.logprobs)
        out["mcp_calls"] = calls
        return JSONResponse(out)

    if body.stream:

        def event_chunk(event: ChatEvent) -> dict | None:
            fields = delta_body(event.delta)
            if not fields and event.finish_reason is None and not event.logprobs:
                return None
            logprobs = chat_logprobs(event.logprobs) if body.logprobs else None
            return chunk(fields, event.finish_reason, logprobs)

        def usage_chunk(usage) -> dict:
            return {
                "id": response_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [],
                "usage": usage_body(usage),
            }

        async def frames():
            yield sse_data(chunk({"role": "assistant", "content": ""}))
            async for frame in openai_frames(
                state.pipeline.stream(prepared),
                event_chunk,
                usage_chunk if body.include_usage else None,
            ):
                yield frame

        return sse_response(frames(), lambda exc: error_frames(exc, lambda r: chunk({}, r)))

    result = await unless_disconnected(request, state.pipeline.complete(prepared))
    if result.finish_reason == "error":
        raise generation_failed(result.error)
    return JSONResponse(completion_body(result, response_id, created, model, body.logprobs))


def to_chat_request(body: ChatCompletionRequest, defaults) -> ChatRequest:
    if body.n != 1:
        raise APIError(400, "n > 1 is not supported by this server", param="n")
    params = body.sampling_params(defaults)
    if body.max_completion_tokens is not None:
        params.max_tokens = body.max_completion_tokens
    params.logprobs = body.logprobs
    params.top_logprobs = body.top_logprobs or 0
    if params.top_logprobs and not params.logprobs:
        raise APIError(400, "top_logprobs requires logprobs: true", param="top_logprobs")
    tools = [t.model_dump(exclude_none=True) for t in body.tools] if body.tools else None
    check_tool_choice(body.tool_choice, tools)
    return ChatRequest(
        messages=[message_dict(m, i) for i, m in enumerate(body.messages)],
        params=params,
        tools=tools,
        tool_choice=body.tool_choice,
        response_format=body.response_format,
        template_kwargs=dict(body.chat_template_kwargs or {}),
        reasoning_effort=body.reasoning_effort,
        thinking_budget=body.thinking_token_budget,
        parallel_tool_calls=body.parallel_tool_calls is not False,
        max_tokens_given=body.max_tokens is not None or body.max_completion_tokens is not None,
    )


def message_dict(message: ChatMessage, index: int) -> dict:
    """A message as templates expect it: content as text, tool calls with JSON arguments."""
    out = message.model_dump(exclude_none=True)
    if isinstance(message.content, list):
        texts = []
        for j, part in enumerate(message.content):
            if part.type in ("text", "input_text"):
                texts.append(part.text or "")
            elif part.type in ("image_url", "input_image", "image"):
                raise APIError(
                    400,
                    "this model accepts text only; image content is not supported",
                    param=f"messages.{index}.content.{j}",
                )
            else:
                raise APIError(
                    400,
                    f"unsupported content part type {part.type!r}",
                    param=f"messages.{index}.content.{j}.type",
                )
        out["content"] = "".join(texts)
    if message.role == "developer":
        out["role"] = "system"
    if message.role == "tool" and not message.tool_call_id:
        out.setdefault("tool_call_id", "")
    for call in out.get("tool_calls", []):
        args = call["function"].get("arguments")
        if not isinstance(args, str):
            call["function"]["arguments"] = json.dumps(args)
    return out


def check_tool_choice(choice, tools: list[dict] | None) -> None:
    if choice in (None, "none", "auto"):
        return
    if not tools:
        raise APIError(400, "tool_choice requires tools", param="tool_choice")
    if choice == "required":
        return
    name = ((choice or {}).get("function") or {}).get("name")
    if choice.get("type") != "function" or not name:
        raise APIError(
            400,
            'tool_choice must be "none", "auto", "required" or '
            '{"type": "function", "function": {"name": ...}}',
            param="tool_choice",
        )
    if name not in {t["function"]["name"] for t in tools}:
        raise APIError(
            400, f"tool_choice names {name!r}, which is not in tools", param="tool_choice"
        )


def delta_body(delta: MessageDelta) -> dict:
    fields: dict = {}
    if delta.reasoning_content:
        fields["reasoning_content"] = delta.reasoning_content
    if delta.content:
        fields["content"] = delta.content
    if delta.tool_calls:
        fields["tool_calls"] = [
            {
                "index": c.index,
                **({"id": c.id, "type": "function"} if c.id else {}),
                "function": {**({"name": c.name} if c.name else {}), "arguments": c.arguments},
            }
            for c in delta.tool_calls
        ]
    return fields


def completion_body(
    result: ChatResult, response_id: str, created: int, model: str, logprobs: bool
) -> dict:
    message = result.message.to_openai()
    message["role"] = "assistant"
    if not message["tool_calls"]:
        del message["tool_calls"]
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": chat_logprobs(result.logprobs) if logprobs else None,
                "finish_reason": result.finish_reason,
            }
        ],
        "usage": usage_body(result.usage),
    }


async def _result_frames(
    result: ChatResult, response_id: str, created: int, model: str, include_usage: bool
):
    """A finished result as a stream: role, the whole message as one delta, finish, usage."""
    head = {
        "id": response_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
    }
    message = result.message
    delta = MessageDelta(
        message.reasoning_content or "",
        message.content or "",
        [ToolCallDelta(i, c.id, c.name, c.arguments) for i, c in enumerate(message.tool_calls)],
    )
    for fields, reason in (
        ({"role": "assistant", "content": ""}, None),
        (delta_body(delta), None),
        ({}, result.finish_reason),
    ):
        yield sse_data(
            {
                **head,
                "choices": [
                    {"index": 0, "delta": fields, "logprobs": None, "finish_reason": reason}
                ],
            }
        )
    if include_usage:
        yield sse_data({**head, "choices": [], "usage": usage_body(result.usage)})
    yield "data: [DONE]\n\n"
