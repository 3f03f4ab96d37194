"""Anthropic Messages request bodies, validated.

Claude Code and the SDKs send many fields this server has no use for (``cache_control``,
``context_management``, ``metadata``, beta flags): unknown fields are accepted and ignored,
while the fields that shape generation are checked so a bad value is a 400 naming it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ...engine.sampling_bounds import INT32_MAX, MAX_STOPS, TopP


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class ContentBlock(_Lenient):
    """One content block; which fields matter depends on ``type``."""

    type: str
    text: str | None = None
    # tool_use
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    # tool_result
    tool_use_id: str | None = None
    content: str | list[dict[str, Any]] | None = None
    is_error: bool = False
    # thinking
    thinking: str | None = None


class Message(_Lenient):
    # "system": Claude Code 2.1's mid-conversation system turns (beta header
    # mid-conversation-tool-changes); rendered where they stand
    role: Literal["user", "assistant", "system"]
    content: str | list[ContentBlock]


class Tool(_Lenient):
    """A client tool (``type`` absent or ``custom``); server tools carry other types."""

    name: str = Field(min_length=1)
    type: str | None = None
    description: str | None = None
    input_schema: dict[str, Any] | None = None


class ToolChoice(_Lenient):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool = False


class Thinking(_Lenient):
    type: str  # enabled | disabled | adaptive
    budget_tokens: int | None = Field(default=None, ge=0)


class PromptFields(_Lenient):
    """What goes into the prompt: shared by /v1/messages and /v1/messages/count_tokens."""

    model: str | None = None
    messages: list[Message] = Field(min_length=1)
    system: str | list[ContentBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    # {"type": "json_schema", "schema": {...}}: the answer's shape (count_tokens ignores it)
    output_format: dict[str, Any] | None = None


class MessagesRequest(PromptFields):
    max_tokens: int = Field(gt=0)
    stop_sequences: list[str] | None = Field(default=None, max_length=MAX_STOPS)
    # Anthropic's own ranges: temperature up to 1, top_k from 0
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: TopP | None = None
    top_k: int | None = Field(default=None, ge=0, le=INT32_MAX)
    stream: bool = False
    metadata: dict[str, Any] | None = None
