"""What a chat template can render, found by rendering probe conversations through it.

Reading a template's source for words ("tools", "thinking") guesses wrong: templates mention
tools in comments, read them under other names (``custom_tools``, a message field), print
arguments as text or iterate them as a mapping, enforce id shapes with ``raise_exception`` or
reject a system message. Each question is answered instead by rendering a small conversation
with distinctive names and looking at what came out (or whether it raised). A profile is
computed once per template text and cached. All probes of one template share one render's
time budget, so a template that runs away costs that budget once, not once per probe.
"""

from __future__ import annotations

import functools
import json
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal

from vllm_mlx.families.call_ids import IdStyle

from .jinja_sandbox import RenderLimits, render_bounded

ArgsForm = Literal["object", "string"]
ToolsVia = Literal["tools", "custom_tools", "message"]

PROBE_TOOL = "vmx_probe_tool"
PROBE_CALL = "vmx_probe_call"
PROBE_RESULT = "vmx probe result"
PROBE_REASONING = "vmx probe reasoning"
_PROBE_ARGS = {"vmx_key": "vmx value"}
_CLIENT_ID = "call_1"
_ALNUM9_ID = "a1B2c3D4e"
_USER = {"role": "user", "content": "vmx probe question"}
# Seconds all probes of one template may take together; past them the rest count as failed.
PROBE_SECONDS = RenderLimits().max_seconds
_DEADLINE: ContextVar[float | None] = ContextVar("template_probe_deadline", default=None)
_TOOL_DEF = {
    "type": "function",
    "function": {
        "name": PROBE_TOOL,
        "description": "probe",
        "parameters": {"type": "object", "properties": {"vmx_key": {"type": "string"}}},
    },
}


@dataclass(frozen=True)
class TemplateProfile:
    """What one template accepts and shows (see the module docstring)."""

    system_role: bool = True  # a system message renders (does not raise)
    tools_none_ok: bool = True  # ``tools=None`` renders a plain request
    tools_via: ToolsVia | None = "tools"  # where tool definitions reach the prompt (None: never)
    shows_calls: bool = True  # an assistant turn's tool calls reach the prompt
    shows_results: bool = True  # tool results reach the prompt
    args_form: ArgsForm = "object"  # how history arguments render as the model's syntax
    id_style: IdStyle | None = None  # the id shape the template enforces (None: any)
    # calls are written only when the turn's content is none (DeepSeek-R1-Distill)
    call_content_none: bool = False
    # a user turn straight after tool results raises (Mistral Nemo, Small 3.x): an empty
    # assistant turn goes between them
    answer_after_results: bool = False
    alternating: bool = False  # two user turns in a row raise (Gemma 2): they are merged
    error: str | None = None  # why no probe conversation rendered (then defaults are used)

    @property
    def results_as_text(self) -> bool:
        """Tool results go in as user turns: the template drops them, or it has no tool
        support at all (no tools, no calls: a generic ``tool`` turn means nothing to it)."""
        return not self.shows_results or (self.tools_via is None and not self.shows_calls)


def call_conversation(
    args: Any,
    call_id: str,
    *,
    reasoning: bool = False,
    content: str | None = "",
    answer: bool = False,
) -> list[dict]:
    """A user turn, an assistant tool call (with ``content``) and its result, an assistant
    answer if ``answer``, and a follow-up question."""
    assistant: dict[str, Any] = {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": PROBE_CALL, "arguments": args}}
        ],
    }
    if reasoning:
        assistant = {**assistant, "reasoning_content": PROBE_REASONING, "thinking": PROBE_REASONING}
    result = {"role": "tool", "tool_call_id": call_id, "name": PROBE_CALL, "content": PROBE_RESULT}
    between = [{"role": "assistant", "content": "vmx probe answer"}] if answer else []
    return [_USER, assistant, result, *between, {"role": "user", "content": "vmx probe followup"}]


def _try(template: str, specials: dict, messages: list[dict], **extra: Any) -> str | None:
    deadline = _DEADLINE.get()
    left = PROBE_SECONDS if deadline is None else deadline - time.monotonic()
    if left <= 0:
        return None
    variables = {**specials, "messages": messages, "add_generation_prompt": True, **extra}
    try:
        return render_bounded(template, variables, RenderLimits(max_seconds=left))
    except Exception:  # any failure of the template means "does not accept this"
        return None


def _tools_via(template: str, specials: dict, base: list[dict]) -> ToolsVia | None:
    """Where tools given to the template reach its output (some print them only inside a
    system turn, so ``base`` has one when the template takes it)."""
    tools = [_TOOL_DEF]
    candidates: list[tuple[ToolsVia, list[dict], dict]] = [
        ("tools", base, {"tools": tools}),
        ("custom_tools", base, {"custom_tools": tools}),
        ("message", [{**base[0], "tools": tools}, *base[1:]], {}),
    ]
    for via, messages, extra in candidates:
        text = _try(template, specials, messages, **extra)
        if text is not None and PROBE_TOOL in text:
            return via
    return None


@dataclass(frozen=True)
class _CallForms:
    """How the probe conversation with a tool call rendered (``rendered`` None: never)."""

    args_form: ArgsForm = "object"
    id_style: IdStyle | None = None
    rendered: str | None = None
    content_none: bool = False
    answer: bool = False


def _call_form(template: str, specials: dict, **shape: Any) -> tuple[ArgsForm, str] | None:
    """The argument form under which one conversation shape renders as the model's syntax
    (an object whose render prints a Python dict means the template wants JSON text)."""
    obj = _try(template, specials, call_conversation(dict(_PROBE_ARGS), **shape))
    text = _try(template, specials, call_conversation(json.dumps(_PROBE_ARGS), **shape))
    if obj is not None and ("'vmx_key'" not in obj or text is None):
        return "object", obj
    return ("string", text) if text is not None else None


def _call_forms(template: str, specials: dict) -> _CallForms:
    """The first conversation shape under which the history call renders: a client id or
    9 alphanumerics; content "" or none (some templates write calls only for none); the
    follow-up question straight after the result, or after an assistant answer (some
    templates reject a user turn right after a tool result)."""
    shapes: tuple[tuple[str, IdStyle | None], ...] = ((_CLIENT_ID, None), (_ALNUM9_ID, "alnum9"))
    for answer in (False, True):
        fallback = None
        for call_id, style in shapes:
            for content in ("", None):
                found = _call_form(
                    template, specials, call_id=call_id, content=content, answer=answer
                )
                if found is None:
                    continue
                forms = _CallForms(found[0], style, found[1], content is None, answer)
                if PROBE_CALL in found[1]:
                    return forms
                fallback = fallback or forms
        if fallback is not None:
            return fallback
    return _CallForms()


def _plain_turns_render(template: str, specials: dict) -> bool:
    """Does the probe conversation render with its call and result as plain text turns?
    (a template that raises on a tool role or a call turn, Gemma 2's)"""
    turns = [
        _USER,
        {"role": "assistant", "content": "vmx probe call text"},
        {"role": "user", "content": "vmx probe result text"},
    ]
    return _try(template, specials, turns) is not None


@functools.lru_cache(maxsize=64)
def _profile(template: str, specials_json: str) -> TemplateProfile:
    token = _DEADLINE.set(time.monotonic() + PROBE_SECONDS)
    try:
        return _probed_profile(template, json.loads(specials_json))
    finally:
        _DEADLINE.reset(token)


def _probed_profile(template: str, specials: dict) -> TemplateProfile:
    forms = _call_forms(template, specials)
    rendered = forms.rendered
    system = {"role": "system", "content": "vmx probe system"}
    plain_ok = _try(template, specials, [_USER]) is not None
    system_role = _try(template, specials, [system, _USER]) is not None or not plain_ok
    base = [system, _USER] if system_role else [_USER]
    none_ok = all(_try(template, specials, m, tools=None) is not None for m in ([_USER], base))
    as_text = rendered is None and plain_ok and _plain_turns_render(template, specials)
    error = None if rendered is not None or as_text else "no probe conversation renders"
    return TemplateProfile(
        system_role=system_role,
        tools_none_ok=none_ok or not plain_ok,
        tools_via=_tools_via(template, specials, base),
        shows_calls=(rendered is None and not as_text) or PROBE_CALL in (rendered or ""),
        shows_results=(rendered is None and not as_text) or PROBE_RESULT in (rendered or ""),
        args_form=forms.args_form,
        id_style=forms.id_style,
        call_content_none=forms.content_none,
        answer_after_results=forms.answer,
        alternating=plain_ok and _try(template, specials, [_USER, _USER]) is None,
        error=error,
    )


def profile_template(template: str, specials: dict[str, Any]) -> TemplateProfile:
    """The template's profile, rendered with the tokenizer's special tokens (cached)."""
    return _profile(template, json.dumps(specials, sort_keys=True, default=str))


def probe_text(template: str, specials: dict[str, Any]) -> str:
    """The template's rendering of a conversation with a reasoning turn, a tool call, its
    result and a tool listing, in the forms it accepts: the text family detection reads
    (markers a template assembles from expressions are literal here)."""
    profile = profile_template(template, specials)
    call_id = _ALNUM9_ID if profile.id_style == "alnum9" else _CLIENT_ID
    args = dict(_PROBE_ARGS) if profile.args_form == "object" else json.dumps(_PROBE_ARGS)
    extra = {"tools": [_TOOL_DEF]} if profile.tools_via == "tools" else {}
    content = None if profile.call_content_none else ""
    for reasoning in (True, False):
        messages = call_conversation(
            args,
            call_id,
            reasoning=reasoning,
            content=content,
            answer=profile.answer_after_results,
        )
        text = _try(template, specials, messages, **extra)
        if text is not None:
            return text
    return _try(template, specials, [_USER]) or ""
