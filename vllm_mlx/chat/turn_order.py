"""Turn orders some chat templates insist on, made from any conversation a client sends.

Templates that check the order of roles raise on conversations every agent sends: Gemma 2
rejects two user turns in a row (which tool results written as user turns make), Mistral
Nemo and Small 3.x a user turn straight after a tool result. The template profile says which
rule a template has (`template_probe.TemplateProfile`); these rewrites satisfy it.
"""

from __future__ import annotations

from typing import Any


def merge_adjacent_turns(messages: list[dict]) -> list[dict]:
    """Consecutive user (or plain assistant) turns as one, their texts joined by a blank
    line; turns with tool calls, tool results and system messages are kept as they are."""
    merged: list[dict] = []
    for message in messages:
        previous = merged[-1] if merged else None
        if previous is not None and _joinable(previous) and _joinable(message):
            if previous["role"] == message["role"]:
                text = "\n\n".join(t for t in (_text(previous), _text(message)) if t)
                merged[-1] = {**previous, "content": text}
                continue
        merged.append(message)
    return merged


def answer_between_results_and_user(messages: list[dict]) -> list[dict]:
    """An empty assistant turn between a tool result and a user turn that follows it."""
    out: list[dict] = []
    for message in messages:
        if message.get("role") == "user" and out and out[-1].get("role") == "tool":
            out.append({"role": "assistant", "content": ""})
        out.append(message)
    return out


def _joinable(message: dict) -> bool:
    role = message.get("role")
    plain = not message.get("tool_calls") and isinstance(message.get("content") or "", str)
    return role in ("user", "assistant") and plain


def _text(message: dict[str, Any]) -> str:
    return message.get("content") or ""
