"""OpenAI chat completions <-> the protocol-neutral request and result: shape only (what a
field means for the model is the pipeline's decision)."""

from __future__ import annotations

import json

from ...constrained import ConstraintError
from ...constrained.custom_tools import (
    CustomTool,
    InputDeltas,
    arguments_of,
    from_format,
    function_form,
    input_of,
)
from ...families.message import MessageDelta, ToolCallDelta
from ...pipeline import ChatResult
from ...request import (
    ChatRequest,
    ContextLengthError,
    ImageSource,
    Thinking,
    collecting_media,
    media_placeholder,
)
from ..errors import APIError
from .protocol import ChatCompletionRequest, ChatMessage
from .stream import chat_logprobs, usage_body
from .structured import constraint_of

# content part type -> what a text-only model is told was omitted
_MEDIA_PARTS = {
    "image_url": "image",
    "input_image": "image",
    "image": "image",
    "input_audio": "audio",
    "file": "file",
}


def to_chat_request(body: ChatCompletionRequest) -> ChatRequest:
    sampling = body.sampling()
    sampling.logprobs = body.logprobs
    sampling.top_logprobs = body.top_logprobs or 0
    if sampling.top_logprobs and not sampling.logprobs:
        raise APIError(400, "top_logprobs requires logprobs: true", param="top_logprobs")
    tools, custom = chat_tools(body)
    with collecting_media() as omitted:
        messages = [message_dict(m, i) for i, m in enumerate(body.messages)]
    return ChatRequest(
        messages=messages,
        omitted_media=omitted,
        sampling=sampling,
        max_tokens=body.max_completion_tokens or body.max_tokens,
        max_tokens_policy="exact",
        tools=tools,
        custom_tools=custom,
        tool_choice=_tool_choice(body.tool_choice, {t.name for t in custom}),
        parallel_tool_calls=body.parallel_tool_calls is not False,
        constraint=constraint_of(body),
        thinking=Thinking(effort=body.reasoning_effort, budget=body.thinking_token_budget),
        template_kwargs=dict(body.chat_template_kwargs or {}),
    )


def chat_tools(body: ChatCompletionRequest) -> tuple[list[dict] | None, list[CustomTool]]:
    """The tools in function form (custom ones as functions of one string, ``input``), and
    what each custom tool's input must match."""
    if not body.tools:
        return None, []
    tools: list[dict] = []
    custom: list[CustomTool] = []
    kinds: dict[str, str] = {}
    for i, tool in enumerate(body.tools):
        if tool.custom is not None and tool.type == "custom":
            name = tool.custom.name
            try:
                custom.append(from_format(name, tool.custom.format, f"tools.{i}.custom.format"))
            except ConstraintError as exc:
                raise APIError(400, str(exc), param=exc.param) from None
            tools.append(function_form(custom[-1], tool.custom.description))
        else:
            assert tool.function is not None
            name = tool.function.name
            tools.append(
                {"type": "function", "function": tool.function.model_dump(exclude_none=True)}
            )
        seen = kinds.get(name)
        if seen is not None and "custom" in (seen, tool.type):  # custom calls go by name
            raise APIError(400, f"two tools are named {name!r}", param=f"tools.{i}")
        kinds[name] = tool.type
    return tools, custom


def _tool_choice(choice: str | dict | None, custom: set[str]) -> str | dict | None:
    """``{"type": "custom", "custom": {"name": ...}}`` as the named function it is here."""
    if not isinstance(choice, dict) or choice.get("type") != "custom":
        return choice
    inner = choice.get("custom")
    name = inner.get("name") if isinstance(inner, dict) else None
    if name not in custom:
        raise APIError(
            400,
            f"tool_choice names custom tool {name!r}, which is not in tools",
            param="tool_choice",
        )
    return {"type": "function", "function": {"name": name}}


def image_source(part: dict, where: str) -> ImageSource:
    """An ``image_url`` part's image: ``{"url": ..., "detail": ...}`` (or the URL alone)."""
    image = part.get("image_url")
    url, detail = (image, None) if isinstance(image, str) else (None, None)
    if isinstance(image, dict):
        url, detail = image.get("url"), image.get("detail")
    if not isinstance(url, str):
        url = None  # names no image: refused where one is read
    if detail not in (None, "auto", "low", "high"):
        raise APIError(
            400, 'detail must be "auto", "low" or "high"', param=f"{where}.image_url.detail"
        )
    return ImageSource(url=url, detail=detail)


def message_dict(message: ChatMessage, index: int) -> dict:
    """A message as templates expect it: content as text, tool calls with JSON arguments."""
    out = message.model_dump(exclude_none=True)
    if isinstance(message.content, list):
        texts = []
        for j, part in enumerate(message.content):
            if part.type in ("text", "input_text"):
                texts.append(part.text or "")
            elif part.type in _MEDIA_PARTS:
                where = f"messages.{index}.content.{j}"
                source = (
                    image_source(part.model_extra or {}, where)
                    if part.type != "input_audio" and part.type != "file"
                    else None
                )
                texts.append(media_placeholder(_MEDIA_PARTS[part.type], where, source))
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
        if call["type"] == "custom":  # as the function the model saw it as
            custom = call.pop("custom")
            call["type"] = "function"
            call["function"] = {"name": custom["name"], "arguments": arguments_of(custom["input"])}
        args = call["function"].get("arguments")
        if not isinstance(args, str):
            call["function"]["arguments"] = json.dumps(args)
    return out


class CustomCalls:
    """Calls of custom tools in their own shape, ``type: custom`` with ``custom: {name,
    input}``; streamed, the input is decoded from the JSON arguments as they arrive."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self._inputs: dict[int, InputDeltas] = {}

    def delta(self, call: ToolCallDelta) -> dict:
        if call.name is not None and call.name in self.names:
            self._inputs[call.index] = InputDeltas()
        inputs = self._inputs.get(call.index)
        if inputs is None:
            return {
                "index": call.index,
                **({"id": call.id, "type": "function"} if call.id else {}),
                "function": {
                    **({"name": call.name} if call.name else {}),
                    "arguments": call.arguments,
                },
            }
        custom = {
            **({"name": call.name} if call.name else {}),
            "input": inputs.feed(call.arguments),
        }
        head = {"id": call.id, "type": "custom"} if call.id else {}
        return {"index": call.index, **head, "custom": custom}

    def rest(self) -> list[dict]:
        """The input each custom call has not streamed yet (at the end of the stream)."""
        pieces = ((i, d.rest()) for i, d in self._inputs.items())
        return [{"index": i, "custom": {"input": text}} for i, text in pieces if text]

    def message(self, message: dict) -> dict:
        for i, call in enumerate(message.get("tool_calls") or []):
            name = call["function"]["name"]
            if name in self.names:
                custom = {"name": name, "input": input_of(call["function"]["arguments"])}
                message["tool_calls"][i] = {"id": call["id"], "type": "custom", "custom": custom}
        return message


def delta_body(delta: MessageDelta, custom: CustomCalls | None = None) -> dict:
    fields: dict = {}
    if delta.reasoning_content:
        fields["reasoning_content"] = delta.reasoning_content
    if delta.content:
        fields["content"] = delta.content
    if delta.tool_calls:
        calls = custom or CustomCalls(set())
        fields["tool_calls"] = [calls.delta(c) for c in delta.tool_calls]
    return fields


def completion_body(
    result: ChatResult,
    response_id: str,
    created: int,
    model: str,
    logprobs: bool,
    custom: CustomCalls | None = None,
) -> dict:
    message = (custom or CustomCalls(set())).message(result.message.to_openai())
    message["role"] = "assistant"
    if not message["tool_calls"]:
        del message["tool_calls"]
    body = {
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
    return with_give_up(body, result.constraint_gave_up)


def with_give_up(body: dict, gave_up: str | None) -> dict:
    """``constraint_gave_up`` on the finished body when enforcing stopped mid-generation
    (docs/constrained.md): the output is not guaranteed to match from there on."""
    if gave_up is not None:
        body["constraint_gave_up"] = gave_up
    return body


def context_error(exc: ContextLengthError, what: str = "messages") -> APIError:
    """OpenAI's wording and ``code`` for a request past the context (``what``: messages for
    chat, prompt for completions), which OpenAI clients and agents key on."""
    limit = exc.context_length
    if exc.completion_tokens:
        total = exc.prompt_tokens + exc.completion_tokens
        message = (
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{total} tokens ({exc.prompt_tokens} in the {what}, {exc.completion_tokens} in "
            f"the completion). Please reduce the length of the {what} or completion."
        )
        param = "max_tokens"
    else:
        message = (
            f"This model's maximum context length is {limit} tokens. However, your {what} "
            f"resulted in {exc.prompt_tokens} tokens. Please reduce the length of the {what}."
        )
        param = what
    return APIError(400, message, param=param, code=exc.code)
