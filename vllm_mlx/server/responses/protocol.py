"""OpenAI Responses request bodies, validated.

Codex and the SDKs send fields this server does not use (``include``, ``prompt_cache_key``,
``client_metadata``, ``truncation``…): unknown fields are accepted and ignored. Input items
are validated one at a time (``input_item``) so a bad item is a 400 naming ``input.N…``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ...engine.sampling_bounds import Temperature, TopP
from ..errors import APIError, validation_error

METADATA_MAX_KEYS, METADATA_MAX_KEY_CHARS, METADATA_MAX_VALUE_CHARS = 16, 64, 512


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class TextConfig(_Lenient):
    format: dict[str, Any] | None = None


class ReasoningConfig(_Lenient):
    effort: str | None = None
    summary: str | None = None


class ResponsesRequest(_Lenient):
    model: str | None = None
    input: str | list[dict[str, Any]] = ""
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    max_output_tokens: int | None = Field(default=None, gt=0)
    max_tool_calls: int | None = Field(default=None, ge=1)  # MCP calls, capped by config
    temperature: Temperature | None = None
    top_p: TopP | None = None
    store: bool = True
    previous_response_id: str | None = None
    stream: bool = False
    metadata: dict[str, str] | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata_bounds(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        """OpenAI's bounds (16 pairs, keys up to 64 and values up to 512 characters): the
        store keeps it, so an unbounded map would be memory any client can claim."""
        if v is None:
            return v
        if len(v) > METADATA_MAX_KEYS:
            raise ValueError(f"at most {METADATA_MAX_KEYS} metadata pairs are allowed")
        for key, value in v.items():
            if len(key) > METADATA_MAX_KEY_CHARS:
                raise ValueError(f"metadata keys are at most {METADATA_MAX_KEY_CHARS} characters")
            if len(value) > METADATA_MAX_VALUE_CHARS:
                raise ValueError(
                    f"metadata values are at most {METADATA_MAX_VALUE_CHARS} characters"
                )
        return v


class MessageItem(_Lenient):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[dict[str, Any]]


class FunctionCallItem(_Lenient):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str = "{}"


class FunctionCallOutputItem(_Lenient):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[dict[str, Any]]


class ReasoningItem(_Lenient):
    type: Literal["reasoning"]
    summary: list[dict[str, Any]] = Field(default_factory=list)
    content: list[dict[str, Any]] | None = None
    encrypted_content: str | None = None  # ours: base64 of the text (convert.py)


class CustomToolCallItem(_Lenient):
    """A call of a free-form ``custom`` tool: its ``input`` is plain text."""

    type: Literal["custom_tool_call"]
    call_id: str
    name: str
    input: str = ""


class CustomToolCallOutputItem(_Lenient):
    type: Literal["custom_tool_call_output"]
    call_id: str
    output: str | list[dict[str, Any]]


class AdditionalToolsItem(_Lenient):
    """Codex's newer request shape: tools (``namespace`` ones among them) sent as an input
    item rather than in ``tools``; they join the request's tools."""

    type: Literal["additional_tools"]
    tools: list[dict[str, Any]] = Field(default_factory=list)


class McpCallItem(_Lenient):
    """An MCP call this server ran earlier, sent back by a stateless client."""

    type: Literal["mcp_call"]
    id: str
    name: str
    arguments: str = "{}"
    output: str | None = None
    error: str | dict[str, Any] | None = None


class McpListToolsItem(_Lenient):
    """A tool listing from an earlier response; it carries nothing the model needs."""

    type: Literal["mcp_list_tools"]


InputItem = (
    MessageItem
    | FunctionCallItem
    | FunctionCallOutputItem
    | ReasoningItem
    | McpCallItem
    | McpListToolsItem
    | CustomToolCallItem
    | CustomToolCallOutputItem
    | AdditionalToolsItem
)
_ITEM_TYPES: dict[str, type[BaseModel]] = {
    "message": MessageItem,
    "function_call": FunctionCallItem,
    "function_call_output": FunctionCallOutputItem,
    "reasoning": ReasoningItem,
    "mcp_call": McpCallItem,
    "mcp_list_tools": McpListToolsItem,
    "custom_tool_call": CustomToolCallItem,
    "custom_tool_call_output": CustomToolCallOutputItem,
    "additional_tools": AdditionalToolsItem,
}


def input_item(raw: dict[str, Any], index: int) -> InputItem:
    """One validated input item; errors name ``input.<index>.<field>``."""
    kind = raw.get("type", "message")
    model = _ITEM_TYPES.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise APIError(400, f"unsupported input item type {kind!r}", param=f"input.{index}.type")
    try:
        return model.model_validate(raw, strict=True)  # type: ignore[return-value]
    except ValidationError as exc:
        error = validation_error(exc)
        error.param = f"input.{index}.{error.param}" if error.param else f"input.{index}"
        error.message = f"input.{index}.{error.message}"
        raise error from None
