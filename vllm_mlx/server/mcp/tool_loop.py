"""The one server-side MCP tool loop behind every surface (chat ``"mcp"``, Responses
``mcp`` tools); each surface only renders its outcome (``openai/mcp.py``,
``responses/mcp.py``).

``vllm_mlx.mcp.loop.run_tool_loop`` runs generate/execute rounds; this adds what a served
request needs around it: the call budget (the request's, capped by the config), the first
turn run from the request already prepared (validated once, by the handler) and later turns
with ``tool_choice: auto``, a failed turn as an error, and one result for all turns: usage
summed, and only the client's own calls left pending.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from ...chat.template import ChatTemplateError
from ...families.message import ParsedMessage
from ...mcp.loop import LoopResult, ToolRunner, run_tool_loop
from ...pipeline import ChatResult, Pipeline, Prepared, Usage
from ...request import ChatRequest, RequestError
from ..errors import APIError
from ..streaming import generation_failed


def call_budget(manager: Any, asked: int | None) -> int:
    """MCP calls a request may make: what it asked for, capped by the config."""
    limit = manager.config.max_tool_calls
    return min(asked or limit, limit)


class ToolLoopRun:
    """One request's loop. ``run()`` returns every turn as one ``ChatResult`` whose
    ``finish_reason`` is ``tool_calls`` (client calls pending), ``length`` (the call budget
    ran out) or the last turn's; ``loop`` then holds the executed calls."""

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
        self._first: Prepared | None = prepared
        self.runner = runner
        self.budget = budget
        self.allowed_tools = allowed_tools
        self.turns: list[ChatResult] = []
        self.loop: LoopResult | None = None

    @property
    def cut_off(self) -> bool:
        """The loop stopped because the call budget ran out."""
        return self.loop is not None and self.loop.cut_off

    async def run(self) -> ChatResult:
        self.loop = loop = await run_tool_loop(
            self._generate,
            self.chat.messages,
            self.runner,
            max_tool_calls=self.budget,
            allowed_tools=self.allowed_tools,
        )
        last = self.turns[-1]
        # MCP calls were answered here; only the client's own calls go back to it
        message = replace(loop.message, tool_calls=list(loop.pending_tool_calls))
        if message.tool_calls:
            reason = "tool_calls"
        elif loop.cut_off:
            reason = "length"
        else:
            reason = last.finish_reason
        gave_up = next((t.constraint_gave_up for t in self.turns if t.constraint_gave_up), None)
        return replace(
            last,
            message=message,
            usage=Usage.summed(t.usage for t in self.turns),
            finish_reason=reason,
            constraint_gave_up=gave_up,
        )

    async def _generate(self, messages: list[dict]) -> ParsedMessage:
        prepared, self._first = self._first, None
        if prepared is None:  # later turns: the client's tool_choice applied to the first
            turn = replace(self.chat, messages=messages, tool_choice="auto")
            try:
                # off the event loop: rendering, and a vision model's images decoded
                prepared = await asyncio.to_thread(self.pipeline.prepare_chat, turn)
            except (RequestError, ChatTemplateError) as exc:  # e.g. the context is full
                raise APIError(400, f"after {len(self.turns)} turns: {exc}") from None
        result = await self.pipeline.complete(prepared)
        if result.finish_reason in ("error", "cancelled"):
            raise generation_failed(result.error)
        self.turns.append(result)
        return result.message
