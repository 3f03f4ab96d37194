"""The one server-side MCP tool loop behind every surface (chat ``"mcp"``, Responses
``mcp`` tools), as one event stream each surface renders with its usual stream code
(``streaming.event_frames``).

``vllm_mlx.mcp.loop.run_tool_loop`` runs generate/execute rounds; this adds what a served
request needs around it: the call budget (the request's, capped by the config), the first
turn run from the request already prepared (validated and admitted once, by the handler),
later turns prepared off the event loop with ``tool_choice: auto``, a failed turn as an
error, and one stream for all turns: the model's deltas as it writes them (calls the loop
runs held back), each MCP call as it starts and ends, and one terminal event with the usage
summed and only the client's own calls pending. A non-streamed answer is the same stream
folded (``ToolLoopRun.result``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import replace
from typing import Any

from ...chat.template_kwargs import ChatTemplateError
from ...engine.generation import TokenLogprob
from ...families.message import MessageDelta, ParsedMessage, ToolCall, ToolCallDelta
from ...mcp.loop import CallFinished, CallStarted, LoopResult, ToolRunner, executes, run_tool_loop
from ...pipeline import ChatEvent, ChatResult, Pipeline, Prepared, Usage
from ...request import ChatRequest, RequestError
from ..errors import APIError
from ..streaming import generation_failed

LoopEvent = ChatEvent | CallStarted | CallFinished


def call_budget(manager: Any, asked: int | None) -> int:
    """MCP calls a request may make: what it asked for, capped by the config."""
    limit = manager.config.max_tool_calls
    return min(asked or limit, limit)


class ToolLoopRun:
    """One request's loop. ``events()`` streams it; its terminal event's ``finish_reason``
    is ``tool_calls`` (client calls pending), ``length`` (the call budget ran out, see
    ``cut_off``) or the last turn's; ``loop`` then holds the executed calls."""

    def __init__(
        self,
        pipeline: Pipeline,
        chat: ChatRequest,
        prepared: Prepared,
        runner: ToolRunner,
        *,
        budget: int,
        allowed_tools: set[str] | None = None,
    ):
        self.pipeline = pipeline
        self.chat = chat
        self.runner = runner
        self.budget = budget
        self.allowed_tools = allowed_tools
        # admitted now, as any stream is: a full queue is a 429 before the response starts
        self._first: tuple[Prepared, AsyncGenerator[ChatEvent, None]] | None = (
            prepared,
            pipeline.stream(prepared),
        )
        self._ends: list[ChatEvent] = []  # each turn's terminal event
        self.loop: LoopResult | None = None

    @property
    def cut_off(self) -> bool:
        """The loop stopped because the call budget ran out."""
        return self.loop is not None and self.loop.cut_off

    async def events(self) -> AsyncGenerator[LoopEvent, None]:
        """Every turn as one stream, ending with the one terminal ``ChatEvent``."""
        steps = run_tool_loop(
            self._turn,
            self.chat.messages,
            self.runner,
            max_tool_calls=self.budget,
            allowed_tools=self.allowed_tools,
        )
        async with aclosing(steps):
            async for step in steps:
                if isinstance(step, LoopResult):
                    self.loop = step
                    yield self._terminal(step)
                else:
                    yield step

    async def result(self) -> ChatResult:
        """The stream consumed to its end: what a non-streamed request answers."""
        fold = _Fold()
        async for event in self.events():
            if isinstance(event, ChatEvent):
                fold.add(event)
        return fold.result()

    async def _turn(self, messages: list[dict]) -> AsyncGenerator[ChatEvent | ParsedMessage, None]:
        if self._first is not None:
            (prepared, events), self._first = self._first, None
        else:  # later turns: the client's tool_choice applied to the first
            turn = replace(self.chat, messages=messages, tool_choice="auto")
            try:  # off the event loop: rendering, tokenizing, a vision model's images decoded
                prepared = await asyncio.to_thread(self.pipeline.prepare_chat, turn)
            except (RequestError, ChatTemplateError) as exc:  # e.g. the context is full
                raise APIError(400, f"after {len(self._ends)} turns: {exc}") from None
            events = self.pipeline.stream(prepared)
        held = _HeldCalls(lambda name: executes(self.runner, self.allowed_tools, name))
        async with aclosing(events):
            async for event in events:
                if event.finish_reason in ("error", "cancelled"):
                    raise generation_failed(event.error)
                if event.finish_reason is not None:
                    self._ends.append(event)
                delta = held.shown(event.delta)
                if delta or event.logprobs:
                    yield ChatEvent(delta, event.logprobs)
        yield prepared.output.message

    def _terminal(self, loop: LoopResult) -> ChatEvent:
        last = self._ends[-1]
        if loop.pending_tool_calls:
            reason = "tool_calls"
        elif loop.cut_off:
            reason = "length"
        else:
            reason = last.finish_reason or "stop"  # a turn's end always has one
        gave_up = next((e.constraint_gave_up for e in self._ends if e.constraint_gave_up), None)
        usage = Usage.summed(e.usage for e in self._ends if e.usage is not None)
        return ChatEvent(MessageDelta(), [], reason, last.stop_reason, None, usage, gave_up)


class _HeldCalls:
    """A turn's deltas without the calls the loop runs (the client never sees them); the
    client's own calls renumbered from 0."""

    def __init__(self, runs: Callable[[str], bool]):
        self.runs = runs
        self.shown_index: dict[int, int | None] = {}  # the parser's index -> shown, or held

    def shown(self, delta: MessageDelta) -> MessageDelta:
        calls: list[ToolCallDelta] = []
        for call in delta.tool_calls:
            if call.index not in self.shown_index:
                held = call.name is not None and self.runs(call.name)
                shown = [i for i in self.shown_index.values() if i is not None]
                self.shown_index[call.index] = None if held else len(shown)
            index = self.shown_index[call.index]
            if index is not None:
                calls.append(replace(call, index=index))
        return replace(delta, tool_calls=calls) if delta.tool_calls else delta


class _Fold:
    """Deltas put back together, as a streaming client does."""

    def __init__(self) -> None:
        self.reasoning = ""
        self.content = ""
        self.calls: dict[int, ToolCall] = {}
        self.logprobs: list[TokenLogprob] = []
        self.last: ChatEvent | None = None

    def add(self, event: ChatEvent) -> None:
        self.reasoning += event.delta.reasoning_content
        self.content += event.delta.content
        for piece in event.delta.tool_calls:
            call = self.calls.setdefault(
                piece.index, ToolCall(piece.id or "", piece.name or "", "")
            )
            call.arguments += piece.arguments
        self.logprobs += event.logprobs
        self.last = event

    def result(self) -> ChatResult:
        last = self.last
        assert last is not None and last.finish_reason is not None
        message = ParsedMessage(
            self.reasoning or None,
            self.content or None,
            [self.calls[i] for i in sorted(self.calls)],
        )
        return ChatResult(
            message,
            last.finish_reason,
            last.stop_reason,
            last.usage or Usage(),
            self.logprobs,
            constraint_gave_up=last.constraint_gave_up,
        )
