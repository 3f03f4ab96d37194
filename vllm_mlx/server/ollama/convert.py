"""Ollama requests <-> the protocol-neutral request and result: shape only.

Messages become OpenAI-format chat messages (tool-call arguments as JSON text, a tool
result answering the call it names), ``options`` become ``Sampling`` and a token limit,
``format`` the one ``Constraint``, ``think`` the ``Thinking`` asked for; what each means for
the model (the template's switch, whether the limit fits) is the pipeline's decision.
"""

from __future__ import annotations

import json
import logging
import math
import re

from ...constrained import Constraint
from ...families.message import ToolCall as ParsedCall
from ...request import (
    ChatRequest,
    ContextLengthError,
    ImageSource,
    Sampling,
    Thinking,
    collecting_media,
    media_placeholder,
)
from ..errors import APIError
from .protocol import ChatBody, GenerateBody, GenerationFields, Message, Options

log = logging.getLogger(__name__)

_EFFORTS = {"low": "low", "medium": "medium", "high": "high", "max": "xhigh"}


def chat_request(body: ChatBody) -> ChatRequest:
    """The internal request for /api/chat."""
    with collecting_media() as omitted:
        messages = _messages(body.messages)
    tools = [t.model_dump(exclude_none=True) for t in body.tools] if body.tools else None
    chat = _with_generation_fields(ChatRequest(messages=messages, tools=tools), body)
    chat.omitted_media = omitted
    return chat


def generate_request(body: GenerateBody) -> ChatRequest:
    """The internal request for /api/generate through the chat template: the system prompt,
    then the prompt as the user's turn."""
    if body.template:
        raise APIError(400, "template is not supported: the model's own template is used")
    with collecting_media() as omitted:
        content = body.prompt + _images(body.images, "images")
    messages = [{"role": "system", "content": body.system}] if body.system else []
    messages.append({"role": "user", "content": content})
    chat = _with_generation_fields(ChatRequest(messages=messages), body)
    chat.omitted_media = omitted
    return chat


def check_generate(body: GenerateBody) -> None:
    """What /api/generate refuses whatever the path (raw, template, fill-in-the-middle)."""
    if body.context:
        raise APIError(
            400,
            "context (Ollama's deprecated token memory) is not supported: send the "
            "conversation to /api/chat as messages",
        )
    if body.raw and (body.template or body.system):
        raise APIError(400, "raw mode does not support template, system, or context")
    if body.images and (body.raw or body.suffix):
        raise APIError(
            400, "images are not supported with raw or suffix: this model reads text only"
        )


def _with_generation_fields(chat: ChatRequest, body: GenerationFields) -> ChatRequest:
    options = body.options or Options()
    chat.sampling = sampling_of(body)
    chat.max_tokens = max_tokens_of(options)
    # Ollama generates until num_predict or the context's end: a limit, never a refusal
    chat.max_tokens_policy = "cap"
    chat.context_limit = options.num_ctx
    chat.constraint = format_constraint(body.format)
    chat.thinking = thinking_of(body.think)
    return chat


def sampling_of(body: GenerationFields) -> Sampling:
    options = body.options or Options()
    seed = options.seed if options.seed is not None and options.seed >= 0 else None
    return Sampling(
        **options.sampler_kwargs(),
        repetition_penalty=options.repeat_penalty,
        seed=seed,
        stop=list(options.stop or []),
        logprobs=body.logprobs,
        top_logprobs=(body.top_logprobs or 0) if body.logprobs else 0,
    )


def max_tokens_of(options: Options) -> int | None:
    """``num_predict``: positive is the limit; 0, -1 (no limit) and -2 (fill the context)
    all leave it to the room the context leaves."""
    n = options.num_predict
    return n if n is not None and n > 0 else None


def format_constraint(fmt: str | dict | None) -> Constraint | None:
    if fmt is None or fmt == "":
        return None
    if fmt == "json":
        return Constraint("json_object", None, "format")
    if isinstance(fmt, dict):
        return Constraint("json_schema", fmt, "format")
    raise APIError(400, f'format must be "json" or a JSON schema object, not {fmt!r}')


def thinking_of(think: bool | str | None) -> Thinking:
    if think is None:
        return Thinking()
    if isinstance(think, bool):
        return Thinking(enabled=think)
    return Thinking(effort=_EFFORTS[think])


# Go's time.ParseDuration units, which Ollama's keep_alive strings use
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_MAX_KEEP_ALIVE = 10 * 365 * 24 * 3600.0  # past this, "forever" is what was meant


def keep_alive_seconds(value: float | str | None) -> float | None:
    """Seconds a model stays loaded once idle (None: the server's ``--model-ttl``;
    ``math.inf``: forever, as a negative value asks)."""
    if value is None:
        return None
    if isinstance(value, str):
        seconds = _duration(value.strip())
    else:
        seconds = float(value)
    if seconds < 0 or seconds > _MAX_KEEP_ALIVE:
        return math.inf
    return seconds


def _duration(text: str) -> float:
    sign, body = (-1, text[1:]) if text.startswith("-") else (1, text.removeprefix("+"))
    if body == "0":
        return 0.0
    if re.fullmatch(r"\d+(\.\d+)?", body):  # a number of seconds, as a string
        return sign * float(body)
    total, at = 0.0, 0
    for match in _PART.finditer(body):
        if match.start() != at:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        at = match.end()
    if not body or at != len(body) or len(body) > 64:
        raise APIError(400, f'keep_alive: invalid duration {text[:40]!r} (e.g. "5m", "1h", 300)')
    return sign * total


def _messages(messages: list[Message]) -> list[dict]:
    """Chat messages as templates expect them; a tool result without an id answers the
    latest call of the tool it names."""
    out: list[dict] = []
    call_ids: dict[str, str] = {}  # tool name -> id of its latest call
    for i, message in enumerate(messages):
        content = (message.content or "") + _images(message.images, f"messages.{i}.images")
        entry: dict = {"role": message.role, "content": content}
        if message.role == "assistant":
            if message.thinking:
                entry["reasoning_content"] = message.thinking
            calls = []
            for j, call in enumerate(message.tool_calls or []):
                call_id = call.id or f"call_{i}_{j}"
                call_ids[call.function.name] = call_id
                arguments = call.function.arguments
                if not isinstance(arguments, str):
                    arguments = json.dumps(arguments, ensure_ascii=False)
                calls.append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": call.function.name, "arguments": arguments},
                    }
                )
            if calls:
                entry["tool_calls"] = calls
        elif message.role == "tool":
            name = message.tool_name or ""
            entry["tool_call_id"] = message.tool_call_id or call_ids.get(name, "")
            if name:
                entry["name"] = name
        out.append(entry)
    return out


def _images(images: list[str] | None, param: str) -> str:
    """Each image (base64, as Ollama sends them) where the message has it: read by a
    vision model, a placeholder for a text-only one (``--unsupported-media``)."""
    return "".join(
        media_placeholder("image", f"{param}.{k}", ImageSource(data=image))
        for k, image in enumerate(images or [])
    )


# -- results ------------------------------------------------------------------------------


def tool_call_body(index: int, call_id: str | None, name: str, arguments: str) -> dict:
    """A call in Ollama's shape: arguments as an object."""
    body: dict = {"function": {"index": index, "name": name, "arguments": _arguments(arguments)}}
    if call_id:
        body["id"] = call_id
    return body


def tool_calls_body(calls: list[ParsedCall]) -> list[dict]:
    return [tool_call_body(i, c.id, c.name, c.arguments) for i, c in enumerate(calls)]


def _arguments(text: str) -> dict:
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError:
        log.warning("tool call arguments are not JSON: %r", text[:200])
        return {}
    return value if isinstance(value, dict) else {}


def done_reason(finish_reason: str | None) -> str:
    """Ollama says ``stop`` for a turn that ends in tool calls too."""
    return "length" if finish_reason == "length" else "stop"


def context_error(exc: ContextLengthError) -> APIError:
    needed = exc.prompt_tokens + exc.completion_tokens
    return APIError(
        400,
        f"the request needs {needed} tokens ({exc.prompt_tokens} in the prompt), more than "
        f"the context length of {exc.context_length} tokens (num_ctx, or the model's)",
    )
