"""Anthropic Messages <-> the internal chat request and result.

Requests become OpenAI-format chat messages (the pipeline's one input format), so every
template, parser and constraint behaves the same on /v1/messages as on chat completions;
results become Anthropic content blocks and stop reasons.
"""

from __future__ import annotations

import json
import logging

from ...constrained import Constraint
from ...families.message import ParsedMessage, ToolCall
from ...pipeline import Usage
from ...request import (
    ChatRequest,
    ContextLengthError,
    ImageSource,
    Sampling,
    Thinking,
    collecting_media,
    media_placeholder,
)
from ..errors import APIError, part_text
from .protocol import ContentBlock, Message, MessagesRequest, PromptFields, Tool

log = logging.getLogger(__name__)

# Claude Code's first system block changes on every call; in the prompt it would defeat
# prefix caching, and it means nothing to the model.
BILLING_HEADER = "x-anthropic-billing-header:"
_IGNORED_BLOCKS = {"redacted_thinking"}
_MEDIA_BLOCKS = {"image": "image", "document": "document"}


def to_chat_request(body: PromptFields) -> ChatRequest:
    """The internal request for a Messages (or count_tokens) body."""
    tools = _tools(body.tools)
    tool_choice, parallel = _tool_choice(body)
    with collecting_media() as omitted:
        messages = _system(body.system) + _messages(body.messages)
    chat = ChatRequest(
        messages=messages,
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=parallel,
        thinking=_thinking(body),
        omitted_media=omitted,
        constraint=_output_format(body.output_format),
    )
    if isinstance(body, MessagesRequest):
        chat.sampling = Sampling(
            temperature=body.temperature,
            top_p=body.top_p,
            top_k=body.top_k,
            stop=list(body.stop_sequences or []),
        )
        # Anthropic's max_tokens is a cap (Claude Code asks for 32000): fitted to the room
        # the prompt leaves rather than rejected.
        chat.max_tokens, chat.max_tokens_policy = body.max_tokens, "cap"
    return chat


def _thinking(body: PromptFields) -> Thinking:
    """``enabled`` (with its budget) and ``disabled`` switch; ``adaptive`` leaves the
    template's default."""
    if body.thinking is None or body.thinking.type not in ("enabled", "disabled"):
        return Thinking()
    if body.thinking.type == "disabled":
        return Thinking(enabled=False)
    return Thinking(enabled=True, budget=body.thinking.budget_tokens)


def _output_format(fmt: dict | None) -> Constraint | None:
    """``output_format: {"type": "json_schema", "schema": {...}}`` (structured outputs)."""
    if fmt is None:
        return None
    if fmt.get("type") != "json_schema":
        raise APIError(400, 'output_format.type must be "json_schema"', param="output_format.type")
    if not isinstance(fmt.get("schema"), dict):
        raise APIError(
            400, "output_format.schema must be a JSON schema object", param="output_format.schema"
        )
    return Constraint("json_schema", fmt["schema"], "output_format")


def _system(system: str | list[ContentBlock] | None) -> list[dict]:
    if system is None:
        return []
    if isinstance(system, str):
        texts = [system]
    else:
        texts = [b.text or "" for b in system if b.type == "text"]
        texts = [t for t in texts if not t.startswith(BILLING_HEADER)]
    text = "\n\n".join(t for t in texts if t)
    return [{"role": "system", "content": text}] if text else []


def _messages(messages: list[Message]) -> list[dict]:
    out: list[dict] = []
    for i, message in enumerate(messages):
        blocks = message.content
        if isinstance(blocks, str):
            blocks = [ContentBlock(type="text", text=blocks)]
        if message.role == "assistant":
            out.append(_assistant(blocks, i))
        elif message.role == "system":
            text = "".join(b.text or "" for b in blocks if b.type == "text")
            out.append({"role": "system", "content": text})
        else:
            out.extend(_user(blocks, i))
    return out


def _assistant(blocks: list[ContentBlock], i: int) -> dict:
    texts, thoughts, calls = [], [], []
    for j, block in enumerate(blocks):
        if block.type == "text":
            texts.append(block.text or "")
        elif block.type == "thinking":
            thoughts.append(block.thinking or "")
        elif block.type == "tool_use":
            calls.append(
                {
                    "id": block.id or f"toolu_{i}_{j}",
                    "type": "function",
                    "function": {
                        "name": block.name or "",
                        "arguments": json.dumps(block.input or {}, ensure_ascii=False),
                    },
                }
            )
        elif block.type not in _IGNORED_BLOCKS:
            raise _unsupported(block, i, j)
    message: dict = {"role": "assistant", "content": "".join(texts)}
    if thoughts:
        message["reasoning_content"] = "\n".join(thoughts)
    if calls:
        message["tool_calls"] = calls
    return message


def _user(blocks: list[ContentBlock], i: int) -> list[dict]:
    """A user turn: tool results become tool messages, text runs become user messages."""
    out: list[dict] = []
    texts: list[str] = []

    def flush() -> None:
        if texts:
            out.append({"role": "user", "content": "".join(texts)})
            texts.clear()

    for j, block in enumerate(blocks):
        if block.type == "text":
            texts.append(block.text or "")
        elif block.type in _MEDIA_BLOCKS:
            where = f"messages.{i}.content.{j}"
            source = image_source(block.model_extra or {}) if block.type == "image" else None
            texts.append(media_placeholder(_MEDIA_BLOCKS[block.type], where, source))
        elif block.type == "tool_result":
            flush()
            content = _tool_result_text(block, f"messages.{i}.content.{j}.content")
            out.append(
                {"role": "tool", "tool_call_id": block.tool_use_id or "", "content": content}
            )
        elif block.type not in _IGNORED_BLOCKS:
            raise _unsupported(block, i, j)
    flush()
    return out


def image_source(block: dict) -> ImageSource:
    """An image block's ``source``: ``{"type": "base64", "media_type", "data"}`` or
    ``{"type": "url", "url"}`` (anything else names no image: refused where one is read)."""
    source = block.get("source")
    if not isinstance(source, dict):
        return ImageSource()
    data, url, media_type = source.get("data"), source.get("url"), source.get("media_type")
    return ImageSource(
        data=data if source.get("type") == "base64" and isinstance(data, str) else None,
        media_type=media_type if isinstance(media_type, str) else None,
        url=url if source.get("type") == "url" and isinstance(url, str) else None,
    )


def _tool_result_text(block: ContentBlock, param: str) -> str:
    content = block.content
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:
        parts = []
        for k, part in enumerate(content):
            kind = part.get("type")
            if kind in _MEDIA_BLOCKS:
                source = image_source(part) if kind == "image" else None
                parts.append(media_placeholder(_MEDIA_BLOCKS[kind], f"{param}.{k}", source))
            elif kind == "text":
                parts.append(part_text(part, "text", f"{param}.{k}"))
            else:
                raise APIError(
                    400, f"unsupported tool_result content type {kind!r}", param=f"{param}.{k}.type"
                )
        text = "".join(parts)
    return f"Error: {text}" if block.is_error else text


def _unsupported(block: ContentBlock, i: int, j: int) -> APIError:
    param = f"messages.{i}.content.{j}"
    return APIError(400, f"unsupported content block type {block.type!r}", param=f"{param}.type")


def _tools(tools: list[Tool] | None) -> list[dict] | None:
    out = []
    for tool in tools or []:
        if tool.type not in (None, "custom"):
            log.info("skipping Anthropic server tool %r (type %s)", tool.name, tool.type)
            continue
        function = {
            "name": tool.name,
            "parameters": tool.input_schema or {"type": "object", "properties": {}},
        }
        if tool.description:
            function["description"] = tool.description
        out.append({"type": "function", "function": function})
    return out or None


def _tool_choice(body: PromptFields) -> tuple[str | dict, bool]:
    choice = body.tool_choice
    if choice is None:
        return "auto", True
    mapped: str | dict = {"auto": "auto", "any": "required", "none": "none"}.get(choice.type, "")
    if choice.type == "tool":
        if not choice.name:
            raise APIError(400, 'tool_choice type "tool" needs a name', param="tool_choice.name")
        mapped = {"type": "function", "function": {"name": choice.name}}
    return mapped, not choice.disable_parallel_tool_use


# -- results ------------------------------------------------------------------------------


def tool_use_id(call_id: str) -> str:
    """Anthropic ids look like ``toolu_…``; the parsers make OpenAI ``call_…`` ids."""
    return call_id if call_id.startswith("toolu_") else "toolu_" + call_id.removeprefix("call_")


def tool_input(call: ToolCall) -> dict:
    try:
        value = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        log.warning("tool call %s has arguments that are not JSON: %r", call.id, call.arguments)
        return {}
    return value if isinstance(value, dict) else {}


def content_blocks(message: ParsedMessage) -> list[dict]:
    blocks: list[dict] = []
    if message.reasoning_content:
        blocks.append({"type": "thinking", "thinking": message.reasoning_content, "signature": ""})
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    for call in message.tool_calls:
        blocks.append(
            {
                "type": "tool_use",
                "id": tool_use_id(call.id),
                "name": call.name,
                "input": tool_input(call),
            }
        )
    return blocks


def stop_reason(finish_reason: str | None, stop: str | int | None) -> tuple[str, str | None]:
    """Anthropic ``stop_reason`` and ``stop_sequence`` for the pipeline's finish reason."""
    if finish_reason == "length":
        return "max_tokens", None
    if finish_reason == "tool_calls":
        return "tool_use", None
    if isinstance(stop, str):
        return "stop_sequence", stop
    return "end_turn", None


def usage_body(usage: Usage) -> dict:
    """Anthropic usage: ``input_tokens`` excludes the prompt tokens read from the cache."""
    return {
        "input_tokens": usage.prompt_tokens - usage.cached_tokens,
        "cache_read_input_tokens": usage.cached_tokens,
        "cache_creation_input_tokens": 0,
        "output_tokens": usage.completion_tokens,
    }


def context_error(exc: ContextLengthError) -> APIError:
    """Anthropic's own wording, the one Claude Code parses to say what to cut and compact."""
    needed = exc.prompt_tokens + exc.completion_tokens
    return APIError(400, f"prompt is too long: {needed} tokens > {exc.context_length} maximum")
