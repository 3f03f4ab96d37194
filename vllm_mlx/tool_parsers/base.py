"""What every tool-call parser implements, and the builder that turns its events into a delta.

A parser never returns snapshots: it reports content text, the start of a call and argument
text as they become final, and `DeltaBuilder` folds those events into one `MessageDelta`.

Streams are fed a few characters at a time, so most feeds change nothing but append text to
one field. ``quick`` answers those feeds without the general machinery: it returns
``(where, text)`` (`REASONING`, `CONTENT` or a call index for argument text, see
`families.message`) or None when the general ``feed`` must run. It only commits state when it
answers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from vllm_mlx.families.message import CONTENT, MessageDelta, Quick, ToolCallDelta


class DeltaBuilder:
    """Collects the events of one feed/finish step into a `MessageDelta`; `take` resets it, so
    one builder serves a whole stream."""

    def __init__(self) -> None:
        self._reasoning: list[str] = []
        self._content: list[str] = []
        self._calls: list[ToolCallDelta] = []

    def reasoning(self, text: str) -> None:
        if text:
            self._reasoning.append(text)

    def content(self, text: str) -> None:
        if text:
            self._content.append(text)

    def call_start(self, index: int, call_id: str, name: str) -> None:
        self._calls.append(ToolCallDelta(index=index, id=call_id, name=name))

    def arguments(self, index: int, text: str) -> None:
        if not text:
            return
        if self._calls and self._calls[-1].index == index:
            self._calls[-1].arguments += text
        else:
            self._calls.append(ToolCallDelta(index=index, arguments=text))

    def take(self) -> MessageDelta:
        """The delta collected since the last `take` (a fresh object every time)."""
        delta = MessageDelta("".join(self._reasoning), "".join(self._content), self._calls)
        self._reasoning.clear()
        self._content.clear()
        self._calls = []
        return delta


class ToolParser(ABC):
    """Splits content text into plain content and tool calls, incrementally.

    ``feed`` may be called with any chunking; together with ``finish`` it must report the same
    events as one ``feed`` of the whole text followed by ``finish``.
    """

    def __init__(self, tools: list[dict] | None = None) -> None:
        self.tools = tools or []

    @abstractmethod
    def feed(self, text: str, out: DeltaBuilder) -> None:
        """Consume more content text, reporting what became final."""

    @abstractmethod
    def finish(self, out: DeltaBuilder) -> None:
        """The text has ended: report everything still held back."""

    def quick(self, text: str) -> Quick:
        """Answer a feed that only extends one field, or None (see the module docstring)."""
        return None

    @property
    def triggers(self) -> tuple[str, ...]:
        """The texts that open a call anywhere in the output (one ends an unclosed
        reasoning block)."""
        return ()


class PlainContent(ToolParser):
    """No call syntax: all text is content (what a marker-removing wrapper wraps when a
    family has answer wrappers but no tool-call format)."""

    def feed(self, text: str, out: DeltaBuilder) -> None:
        out.content(text)

    def finish(self, out: DeltaBuilder) -> None:
        pass

    def quick(self, text: str) -> Quick:
        return CONTENT, text


def parameter_schemas(tools: list[dict]) -> dict[str, dict]:
    """Function name -> its JSON-schema ``properties`` (for typing XML-style values)."""
    schemas: dict[str, dict] = {}
    for tool in tools:
        fn = tool.get("function", tool)
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            params = fn.get("parameters") or {}
            props = params.get("properties") if isinstance(params, dict) else None
            schemas[fn["name"]] = props if isinstance(props, dict) else {}
    return schemas
