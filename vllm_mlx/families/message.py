"""The parsed assistant message and its streaming deltas.

Every parser returns these types; every API adapter reads them. A stream's deltas are plain
suffixes: concatenating each field of every delta gives the field of the final message.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Where a parser's fast path (``quick``) puts a piece of text: reasoning, content, or the
# arguments of the tool call with that index (>= 0); None when the general path must run.
REASONING = -2
CONTENT = -1
Quick = tuple[int, str] | None


@dataclass
class ToolCallDelta:
    """A piece of one tool call. ``id`` and ``name`` arrive on the call's first delta."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass
class MessageDelta:
    """Text added to each field since the previous delta."""

    reasoning_content: str = ""
    content: str = ""
    tool_calls: list[ToolCallDelta] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.reasoning_content or self.content or self.tool_calls)


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text of an object


@dataclass
class ParsedMessage:
    reasoning_content: str | None = None
    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)

    def to_openai(self) -> dict:
        """The OpenAI chat ``message`` fields (also the `vllm-mlx parse` output)."""
        return {
            "reasoning_content": self.reasoning_content,
            "content": self.content,
            "tool_calls": [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in self.tool_calls
            ],
        }
