"""A request's messages fitted to one template, in one ordered list of passes.

Each pass takes the messages and what it needs to know (``Fitting``: the template's probed
profile, the tools, the family's call format, a thinking switch) and returns new messages,
never changing its input; ``fit_messages`` applies ``PASSES`` in order. The template module
only chooses a template, calls ``fit_messages`` and renders. What the passes write for tools a
template cannot show (descriptions, calls and results as text) is ``tool_prompt.py``'s.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from vllm_mlx.families.call_ids import IdStyle, mapped_id
from vllm_mlx.families.formats import ToolCallFormat

from .template_probe import ArgsForm, TemplateProfile
from .tool_prompt import as_plain_chat, with_tool_system_prompt
from .turn_order import answer_between_results_and_user, merge_adjacent_turns

_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


@dataclass(frozen=True)
class Fitting:
    """What the passes read about the template and the request."""

    profile: TemplateProfile
    tools: list[dict] | None = None
    tool_format: ToolCallFormat | None = None
    system_switch: str | None = None  # e.g. ``/no_think``, appended to the system prompt


Pass = Callable[[list[dict], Fitting], list[dict]]


def name_results_and_map_ids(messages: list[dict], fit: Fitting) -> list[dict]:
    """Each tool result gets its call's function ``name`` (some templates require it); call
    ids and results' ``tool_call_id`` are mapped into the shape the template enforces (or
    Kimi's, whose model writes ``functions.NAME:N`` where the id is printed)."""
    style = fit.profile.id_style
    if style is None and fit.tool_format is not None and fit.tool_format.id_style == "kimi":
        style = "kimi"
    return with_call_names_and_ids(messages, style)


def calls_and_results_as_text(messages: list[dict], fit: Fitting) -> list[dict]:
    """The history's calls and results a template drops, written as text in the family's
    call syntax (``tool_prompt.as_plain_chat``)."""
    profile = fit.profile
    if profile.shows_calls and not profile.results_as_text:
        return messages
    return as_plain_chat(
        messages, fit.tool_format, calls=not profile.shows_calls, results=profile.results_as_text
    )


def answer_after_results(messages: list[dict], fit: Fitting) -> list[dict]:
    """An empty answer between tool results and a user turn, for a template that rejects a
    user turn straight after a result (Mistral Nemo, Small 3.x)."""
    if not fit.profile.answer_after_results:
        return messages
    return answer_between_results_and_user(messages)


def alternating_turns(messages: list[dict], fit: Fitting) -> list[dict]:
    """Adjacent user (or plain assistant) turns merged, for a template that rejects two in a
    row (Gemma 2, once results are user turns)."""
    return merge_adjacent_turns(messages) if fit.profile.alternating else messages


def system_switch(messages: list[dict], fit: Fitting) -> list[dict]:
    """The switch at the end of the first system message (one is added when there is none)."""
    text = fit.system_switch
    if not text:
        return messages
    if messages and messages[0].get("role") == "system":
        content = message_text(messages[0])
        return [
            {**messages[0], "content": f"{content}\n{text}" if content else text},
            *messages[1:],
        ]
    return [{"role": "system", "content": text}, *messages]


def tools_in_messages(messages: list[dict], fit: Fitting) -> list[dict]:
    """Tools for a template that does not read a ``tools`` variable: described in the system
    prompt when it shows none at all, or on the first message when it reads them there."""
    if not fit.tools:
        return messages
    if fit.profile.tools_via is None:
        return with_tool_system_prompt(messages, fit.tools, fit.tool_format)
    if fit.profile.tools_via == "message":
        return [{**messages[0], "tools": fit.tools}, *messages[1:]]
    return messages


def system_into_user(messages: list[dict], fit: Fitting) -> list[dict]:
    """For a template that raises on a system role: system text atop the first user turn."""
    return messages if fit.profile.system_role else merge_system_into_user(messages)


def template_shapes(messages: list[dict], fit: Fitting) -> list[dict]:
    """Every message in the forms templates expect (``for_template``)."""
    profile = fit.profile
    return [for_template(m, profile.args_form, profile.call_content_none) for m in messages]


PASSES: tuple[Pass, ...] = (
    name_results_and_map_ids,
    calls_and_results_as_text,
    answer_after_results,
    alternating_turns,
    system_switch,
    tools_in_messages,
    system_into_user,
    template_shapes,
)


def fit_messages(messages: list[dict], fit: Fitting) -> list[dict]:
    """``messages`` through every pass, in order."""
    for step in PASSES:
        messages = step(messages, fit)
    return messages


# -- the rewrites the passes apply -------------------------------------------------------


def with_call_names_and_ids(messages: list[dict], style: IdStyle | None) -> list[dict]:
    """Each tool result gets its call's function ``name``; with a ``style``, call ids and
    result ``tool_call_id`` are mapped into it consistently."""
    names: dict[str, str] = {}
    ids: dict[str, str] = {}
    out = []
    for message in messages:
        if message.get("role") == "assistant" and message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                call_id = str(call.get("id") or "")
                name = str((call.get("function") or {}).get("name") or "")
                names[call_id] = name
                if style is not None:
                    ids.setdefault(call_id, mapped_id(style, call_id, name, len(ids)))
                    call = {**call, "id": ids[call_id]}
                calls.append(call)
            message = {**message, "tool_calls": calls}
        elif message.get("role") == "tool":
            call_id = str(message.get("tool_call_id") or "")
            message = dict(message)
            if not message.get("name") and call_id in names:
                message["name"] = names[call_id]
            if style is not None:
                name = message.get("name") or ""
                message["tool_call_id"] = ids.get(call_id) or mapped_id(
                    style, call_id, name, len(ids)
                )
        out.append(message)
    return out


def merge_system_into_user(messages: list[dict]) -> list[dict]:
    """System messages' text at the top of the first user turn (a system-only conversation
    becomes one user turn)."""
    system = [message_text(m) for m in messages if m.get("role") == "system"]
    rest = [m for m in messages if m.get("role") != "system"]
    if not system:
        return messages
    prefix = "\n\n".join(part for part in system if part)
    for i, message in enumerate(rest):
        if message.get("role") == "user":
            content = message_text(message)
            merged = f"{prefix}\n\n{content}" if content else prefix
            return [*rest[:i], {**message, "content": merged}, *rest[i + 1 :]]
    return [{"role": "user", "content": prefix}, *rest]


def message_text(message: dict) -> str:
    """A message's content as text (a list of text parts joined)."""
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content or ""


def for_template(
    message: dict, args_form: ArgsForm = "object", call_content_none: bool = False
) -> dict:
    """A message as templates expect it: ``content`` always present and never null (templates
    do ``content.split``, ``'x' + content``, ``content|tojson``) except on a call turn without
    text when the template writes calls only then (``call_content_none``), other None-valued
    keys dropped, reasoning under each name templates read, tool-call arguments as objects or
    as JSON text (``args_form``)."""
    message = {key: value for key, value in message.items() if value is not None}
    message.setdefault("content", "")
    if call_content_none and message.get("tool_calls") and not message["content"]:
        message["content"] = None
    reasoning = next((message[key] for key in _REASONING_FIELDS if key in message), None)
    if reasoning is not None:
        message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
    calls = message.get("tool_calls")
    if not calls:
        return message
    converted = []
    for call in calls:
        function = dict(call.get("function", {}))
        args = function.get("arguments")
        if args_form == "string" and not isinstance(args, str):
            function["arguments"] = json.dumps(args if args is not None else {}, ensure_ascii=False)
        elif args_form == "object" and isinstance(args, str):
            try:
                function["arguments"] = json.loads(args)
            except json.JSONDecodeError:
                pass  # a template that wants text still gets the text
        converted.append({**call, "function": function})
    return {**message, "tool_calls": converted}
