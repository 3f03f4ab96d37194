"""OpenAI Responses <-> the internal chat request and result.

Input items become OpenAI chat messages (the pipeline's one input format) so the Responses
surface shares every template, parser and constraint with chat completions; the parsed
message becomes ``reasoning`` / ``message`` / ``function_call`` output items.
"""

from __future__ import annotations

import base64
import binascii
import logging
import uuid

from ...constrained import Constraint, ConstraintError
from ...constrained.custom_tools import (
    CustomTool,
    arguments_of,
    from_format,
    function_form,
    input_of,
)
from ...families.message import ParsedMessage
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
from .protocol import (
    AdditionalToolsItem,
    CustomToolCallItem,
    CustomToolCallOutputItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    McpCallItem,
    McpListToolsItem,
    MessageItem,
    ReasoningItem,
    ResponsesRequest,
    input_item,
)

log = logging.getLogger(__name__)


def new_item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def to_chat_request(
    body: ResponsesRequest, history: list[dict], server_tools: list[dict] | None = None
) -> tuple[ChatRequest, list[dict]]:
    """The internal request, and the conversation (``history`` + this input, without the
    instructions, which do not carry over) to store for a later ``previous_response_id``.
    ``server_tools`` are the MCP tools (chat form) the model sees besides the client's."""
    with collecting_media() as omitted:
        conversation = history + input_messages(body.input)
    system = [{"role": "system", "content": body.instructions}] if body.instructions else []
    tools = request_tools(body)
    chat = ChatRequest(
        messages=system + conversation,
        sampling=Sampling(temperature=body.temperature, top_p=body.top_p),
        max_tokens=body.max_output_tokens,
        max_tokens_policy="exact",
        tools=[*(function_tools(tools) or []), *(server_tools or [])] or None,
        custom_tools=custom_tools(tools),
        tool_choice=_tool_choice(body.tool_choice),
        parallel_tool_calls=body.parallel_tool_calls is not False,
        constraint=_text_format(body),
        thinking=Thinking(effort=body.reasoning.effort if body.reasoning else None),
        omitted_media=omitted,
    )
    return chat, conversation


def input_messages(data: str | list[dict]) -> list[dict]:
    if isinstance(data, str):
        return [{"role": "user", "content": data}] if data else []
    out: list[dict] = []
    open_assistant = False  # reasoning, text and calls of one assistant turn merge
    for i, raw in enumerate(data):
        item = input_item(raw, i)
        if isinstance(item, (McpListToolsItem, AdditionalToolsItem)):  # tools: request_tools
            continue
        if isinstance(item, McpCallItem):
            # an MCP call the server ran: the model's call, then the tool's answer
            if not open_assistant:
                out.append({"role": "assistant", "content": ""})
            call = {"name": item.name, "arguments": item.arguments}
            out[-1].setdefault("tool_calls", []).append(
                {"id": item.id, "type": "function", "function": call}
            )
            out.append({"role": "tool", "tool_call_id": item.id, "content": _mcp_text(item, i)})
            open_assistant = False
        elif isinstance(item, MessageItem) and item.role != "assistant":
            role = "system" if item.role == "developer" else item.role
            out.append({"role": role, "content": _text(item.content, f"input.{i}.content")})
            open_assistant = False
        elif isinstance(item, (FunctionCallOutputItem, CustomToolCallOutputItem)):
            content = _text(item.output, f"input.{i}.output")
            out.append({"role": "tool", "tool_call_id": item.call_id, "content": content})
            open_assistant = False
        else:
            if not open_assistant:
                out.append({"role": "assistant", "content": ""})
                open_assistant = True
            _add_to_assistant(out[-1], item, i)
    return out


def _add_to_assistant(message: dict, item, i: int) -> None:
    if isinstance(item, MessageItem):
        message["content"] += _text(item.content, f"input.{i}.content")
    elif isinstance(item, FunctionCallItem):
        call = {"name": item.name, "arguments": item.arguments}
        message.setdefault("tool_calls", []).append(
            {"id": item.call_id, "type": "function", "function": call}
        )
    elif isinstance(item, CustomToolCallItem):
        call = {"name": item.name, "arguments": arguments_of(item.input)}
        message.setdefault("tool_calls", []).append(
            {"id": item.call_id, "type": "function", "function": call}
        )
    elif isinstance(item, ReasoningItem):
        parts = item.content if item.content else item.summary
        key = "content" if item.content else "summary"
        text = "".join(
            part_text(p, "text", f"input.{i}.{key}.{k}") for k, p in enumerate(parts)
        ) or _decoded(item.encrypted_content)
        if text:
            message["reasoning_content"] = message.get("reasoning_content", "") + text


def _mcp_text(item: McpCallItem, i: int) -> str:
    """What the tool answered: its output, or its error (a string or an error object)."""
    if item.error is None:
        return item.output or ""
    if isinstance(item.error, str):
        return item.error
    content = item.error.get("content")
    if isinstance(content, list):
        param = f"input.{i}.error.content"
        return "".join(
            part_text(p, "text", f"{param}.{k}")
            for k, p in enumerate(content)
            if isinstance(p, dict)
        )
    return str(content if content is not None else item.error.get("message", ""))


def _image(part: dict, where: str) -> ImageSource:
    """An ``input_image``: its ``image_url`` (a URL or a data URL) and ``detail``."""
    url, detail = part.get("image_url"), part.get("detail")
    if not isinstance(url, str):
        url = None  # (a file_id) names no image this server has: refused where one is read
    if detail not in (None, "auto", "low", "high"):
        raise APIError(400, 'detail must be "auto", "low" or "high"', param=f"{where}.detail")
    return ImageSource(url=url, detail=detail)


def _text(content: str | list[dict], param: str) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for k, part in enumerate(content):
        kind = part.get("type")
        if not isinstance(kind, str):
            raise APIError(400, f"{param}.{k}.type must be a string", param=f"{param}.{k}.type")
        if kind in ("input_text", "output_text", "text", "summary_text", "reasoning_text"):
            texts.append(part_text(part, "text", f"{param}.{k}"))
        elif kind == "refusal":
            texts.append(part_text(part, "refusal", f"{param}.{k}"))
        elif kind == "input_image":
            texts.append(media_placeholder("image", f"{param}.{k}", _image(part, f"{param}.{k}")))
        elif kind in ("input_file", "input_audio"):
            texts.append(media_placeholder(kind.removeprefix("input_"), f"{param}.{k}"))
        else:
            raise APIError(
                400, f"unsupported content part type {kind!r}", param=f"{param}.{k}.type"
            )
    return "".join(texts)


def request_tools(body: ResponsesRequest) -> list[dict]:
    """The request's tools: ``tools`` and Codex's ``additional_tools`` input items, with
    ``namespace`` tools flattened into the tools they group."""
    tools = list(body.tools or [])
    for raw in body.input if isinstance(body.input, list) else []:
        if isinstance(raw, dict) and raw.get("type") == "additional_tools":
            tools += [t for t in raw.get("tools") or [] if isinstance(t, dict)]
    flat: list[dict] = []
    for tool in tools:
        inner = tool.get("tools") if tool.get("type") == "namespace" else [tool]
        flat += [t for t in inner or [] if isinstance(t, dict)]
    return flat


def custom_tool_names(body: ResponsesRequest) -> frozenset[str]:
    return frozenset(
        t["name"] for t in request_tools(body) if t.get("type") == "custom" and t.get("name")
    )


def custom_tools(tools: list[dict]) -> list[CustomTool]:
    """What each custom tool's input must match (its ``format``), for the pipeline."""
    return [
        _custom_tool(tool, i)
        for i, tool in enumerate(tools)
        if tool.get("type") == "custom" and isinstance(tool.get("name"), str)
    ]


def _custom_tool(tool: dict, i: int) -> CustomTool:
    try:
        return from_format(tool["name"], tool.get("format"), f"tools.{i}.format")
    except ConstraintError as exc:
        raise APIError(400, str(exc), param=exc.param) from None


def wants_encrypted_reasoning(body: ResponsesRequest) -> bool:
    include = (body.model_extra or {}).get("include")
    return isinstance(include, list) and "reasoning.encrypted_content" in include


def function_tools(tools: list[dict] | None) -> list[dict] | None:
    """Responses function and custom tools in chat form; hosted tools are skipped (logged).
    MCP tools are resolved separately (``responses/mcp_tools.py``)."""
    out: list[dict] = []
    names: dict[str, str] = {}
    for i, tool in enumerate(tools or []):
        kind = tool.get("type")
        if kind == "mcp":
            continue
        if kind not in ("function", "custom"):
            log.info("skipping Responses tool of type %r (not served here)", kind)
            continue
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise APIError(400, f"{kind} tools need a name", param=f"tools.{i}.name")
        description = tool.get("description")
        if description is not None and not isinstance(description, str):
            raise APIError(400, "description must be a string", param=f"tools.{i}.description")
        seen = names.get(tool["name"])
        if seen is not None and "custom" in (kind, seen):  # custom calls are told by name
            raise APIError(400, f"two tools are named {tool['name']!r}", param=f"tools.{i}.name")
        names[tool["name"]] = kind
        if kind == "custom":
            out.append(function_form(_custom_tool(tool, i), description))
            continue
        parameters = tool.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(parameters, dict):
            raise APIError(
                400, "parameters must be a JSON schema object", param=f"tools.{i}.parameters"
            )
        function = {"name": tool["name"], "parameters": parameters}
        if description:
            function["description"] = description
        out.append({"type": "function", "function": function})
    return out or None


def _decoded(encrypted: str | None) -> str:
    """The reasoning text of our own ``encrypted_content`` (base64; someone else's: none)."""
    if not encrypted:
        return ""
    try:
        return base64.b64decode(encrypted, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return ""


def _tool_choice(choice: str | dict | None) -> str | dict:
    if choice is None:
        return "auto"
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise APIError(400, f"unknown tool_choice {choice!r}", param="tool_choice")
        return choice
    if choice.get("type") in ("function", "custom") and choice.get("name"):
        return {"type": "function", "function": {"name": choice["name"]}}
    if choice.get("type") == "mcp":  # a named tool, or any tool, of an MCP server
        name = choice.get("name")
        return {"type": "function", "function": {"name": name}} if name else "required"
    raise APIError(
        400,
        'tool_choice must be "auto", "none", "required", {"type": "function", "name": ...}, '
        '{"type": "custom", "name": ...} or {"type": "mcp", "server_label": ..., "name": ...}',
        param="tool_choice",
    )


# text.format kinds besides text / json_object / json_schema: the custom-tool grammar shape.
_GRAMMAR_SYNTAXES = {"lark": "lark", "regex": "regex", "gbnf": "gbnf"}


def _text_format(body: ResponsesRequest) -> Constraint | None:
    """``text.format``: text, json_object, json_schema, or (an extension in the custom-tool
    shape) ``{"type": "grammar", "syntax": "lark" | "regex" | "gbnf", "definition": ...}``."""
    fmt = body.text.format if body.text else None
    if not fmt or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_object":
        return Constraint("json_object", None, "text.format")
    if fmt.get("type") == "json_schema":
        if not isinstance(fmt.get("schema"), dict):
            raise APIError(
                400, "text.format.schema must be a JSON schema object", param="text.format.schema"
            )
        return Constraint("json_schema", fmt["schema"], "text.format")
    if fmt.get("type") == "grammar":
        syntax = _GRAMMAR_SYNTAXES.get(str(fmt.get("syntax")))
        if syntax is None:
            raise APIError(
                400,
                'text.format.syntax must be "lark", "regex" or "gbnf"',
                param="text.format.syntax",
            )
        return Constraint(syntax, fmt.get("definition"), "text.format.definition")  # type: ignore[arg-type]
    raise APIError(
        400, f"unsupported text.format type {fmt.get('type')!r}", param="text.format.type"
    )


# -- results ------------------------------------------------------------------------------


def reasoning_item(item_id: str, text: str, encrypted: bool = False) -> dict:
    """``encrypted``: also ``encrypted_content``, which here is the text in base64 (opaque to
    clients, NOT encrypted), so stateless clients (``store: false``) can send it back."""
    item = {
        "id": item_id,
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }
    if encrypted:
        item["encrypted_content"] = base64.b64encode(text.encode("utf-8")).decode("ascii")
    return item


def custom_tool_call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: str = "completed"
) -> dict:
    return {
        "id": item_id,
        "type": "custom_tool_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "input": input_of(arguments),
    }


def output_text_part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, text: str, status: str = "completed") -> dict:
    content = [output_text_part(text)] if status == "completed" or text else []
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def function_call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: str = "completed"
) -> dict:
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def output_items(
    message: ParsedMessage, custom: frozenset[str] = frozenset(), encrypted: bool = False
) -> list[dict]:
    """The result as output items; calls of ``custom`` tools as custom_tool_call items."""
    items = []
    if message.reasoning_content:
        items.append(reasoning_item(new_item_id("rs"), message.reasoning_content, encrypted))
    if message.content:
        items.append(message_item(new_item_id("msg"), message.content))
    for call in message.tool_calls:
        make = custom_tool_call_item if call.name in custom else function_call_item
        items.append(make(new_item_id("fc"), call.id, call.name, call.arguments))
    return items


def assistant_message(output: list[dict]) -> dict:
    """The output items as the assistant chat message a follow-up request replays."""
    message: dict = {"role": "assistant", "content": ""}
    for item in output:
        if item["type"] == "reasoning":
            message["reasoning_content"] = "".join(p["text"] for p in item["content"])
        elif item["type"] == "message":
            message["content"] += "".join(p["text"] for p in item["content"])
        elif item["type"] in ("function_call", "custom_tool_call"):
            arguments = item.get("arguments") or arguments_of(item.get("input") or "")
            call = {"name": item["name"], "arguments": arguments}
            message.setdefault("tool_calls", []).append(
                {"id": item["call_id"], "type": "function", "function": call}
            )
    return message


def usage_body(usage: Usage | None) -> dict | None:
    if usage is None:
        return None
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


def status_of(finish_reason: str) -> tuple[str, dict | None]:
    """Response ``status`` and ``incomplete_details`` for the pipeline's finish reason."""
    if finish_reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    if finish_reason in ("error", "cancelled"):
        return "failed", None
    return "completed", None


def context_error(exc: ContextLengthError) -> APIError:
    """The Responses API's wording and ``code``; Codex reads the code and tells its user the
    context window is full (a streamed request fails before its stream starts, as a 400)."""
    needed = exc.prompt_tokens + exc.completion_tokens
    return APIError(
        400,
        "Your input exceeds the context window of this model. Please adjust your input and "
        f"try again. ({needed} tokens > {exc.context_length} maximum)",
        param="max_output_tokens" if exc.completion_tokens else "input",
        code=exc.code,
    )
