"""Forced tool calls: the family's call syntax with each function's schema as arguments."""

from __future__ import annotations

from typing import Any

from .content_constraint import ContentConstraint


def forced_tool_call_constraint(
    tokenizer: Any,
    *,
    tool_choice: Any,
    tools: list[dict] | None,
    tool_parser: str | None,
    parallel_tool_calls: bool,
    content_schema: dict | None,
) -> ContentConstraint | None:
    """The constraint forcing a call for ``tool_choice`` required/named; None otherwise."""
    return None
