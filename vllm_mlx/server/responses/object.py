"""The ``response`` object: one request's identity and settings, echoed in every state
(in_progress, completed, incomplete, failed) that the non-streaming body, the stream events
and ``GET /v1/responses/{id}`` show."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ...pipeline import Usage
from .convert import new_item_id, usage_body
from .protocol import ResponsesRequest


@dataclass
class ResponseObject:
    request: ResponsesRequest
    model: str
    id: str = field(default_factory=lambda: new_item_id("resp"))
    created_at: int = field(default_factory=lambda: int(time.time()))

    def body(
        self,
        status: str,
        output: list[dict],
        usage: Usage | None = None,
        *,
        incomplete_details: dict | None = None,
        error: dict | None = None,
        constraint_gave_up: str | None = None,
    ) -> dict:
        req = self.request
        body = {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": error,
            "incomplete_details": incomplete_details,
            "instructions": req.instructions,
            "max_output_tokens": req.max_output_tokens,
            "max_tool_calls": req.max_tool_calls,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": req.parallel_tool_calls is not False,
            "previous_response_id": req.previous_response_id,
            "reasoning": {
                "effort": req.reasoning.effort if req.reasoning else None,
                "summary": None,
            },
            "store": req.store,
            "temperature": req.temperature,
            "text": {"format": (req.text.format if req.text else None) or {"type": "text"}},
            "tool_choice": req.tool_choice or "auto",
            "tools": [t for t in req.tools or [] if t.get("type") in ("function", "custom", "mcp")],
            "top_p": req.top_p,
            "truncation": "disabled",
            "usage": usage_body(usage),
            "metadata": req.metadata or {},
        }
        if constraint_gave_up is not None:  # docs/constrained.md
            body["constraint_gave_up"] = constraint_gave_up
        return body
