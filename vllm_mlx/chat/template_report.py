"""`vllm-mlx template`'s report: what the server will do with a model's chat template.

For a new model the questions are always the same: which parsers, which thinking switch,
whether the template shows tools or the server injects them (and in which syntax), what the
prompt looks like with a tool call and its result, what the generation prompt opens with
thinking on and off, and whether a call written in the template's own history syntax is read
back by the parser. The report answers them from the real renderer and parsers.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from vllm_mlx.families.formats import ReasoningFormat, ToolCallFormat

from ..protocols import Tokenizer
from .jinja_sandbox import render_bounded
from .stream import parse_output
from .template import choose_template, render_chat, special_tokens, template_variables
from .template_kwargs import ChatTemplateError
from .template_probe import TemplateProfile, profile_template
from .thinking_switch import BUDGET_KEY, EFFORT_KEY, SLASH_SWITCH, decide_thinking, thinking_key

SAMPLE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
SAMPLE_ARGUMENTS = {"city": "Paris"}
_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": json.dumps(SAMPLE_ARGUMENTS)},
}
_OPENING = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the weather in Paris?"},
]
_CALL_TURN = {"role": "assistant", "content": None, "tool_calls": [_CALL]}
_SENTINEL = "vmx sentinel answer"
SAMPLE_CONVERSATION: list[dict[str, Any]] = [
    *_OPENING,
    _CALL_TURN,
    {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"},
    {"role": "user", "content": "Thanks. And tomorrow?"},
]


@dataclass(frozen=True)
class Choice:
    """The parsers picked and why (the runtime's detection)."""

    reasoning: str | None
    tool: str
    reasoning_why: str
    tool_why: str
    reasoning_format: ReasoningFormat | None
    tool_format: ToolCallFormat


class TemplateOverride:
    """A tokenizer carrying another chat template (a ``.jinja`` file under inspection)."""

    def __init__(self, tokenizer: Tokenizer, chat_template: str):
        self._tokenizer = tokenizer
        self.chat_template = chat_template

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)


def describe_switch(key: str | None) -> str:
    if key is None:
        return "none (thinking on/off is left to the model; thinking budgets still hold)"
    if key == SLASH_SWITCH:
        return "/think or /no_think appended to the system prompt"
    if key == EFFORT_KEY:
        return "reasoning_effort (the request's effort is passed through: low/medium/high)"
    if key == BUDGET_KEY:
        return "thinking_budget (0 when thinking is off, else the request's budget)"
    return f"{key} (true/false)"


def describe_tools(profile: TemplateProfile, tool_format: ToolCallFormat) -> list[str]:
    syntax = f"the {tool_format.name} syntax"
    via = {
        "tools": "natively (the `tools` variable)",
        "custom_tools": "natively, read as `custom_tools`",
        "message": "natively, read from a message's `tools` field",
    }
    lines = [
        "tools: "
        + (
            via[profile.tools_via]
            if profile.tools_via
            else f"injected in a system message, {syntax}"
        ),
        "history calls: "
        + ("natively" if profile.shows_calls else f"written as text, {syntax}")
        + f"; arguments as {'an object' if profile.args_form == 'object' else 'JSON text'}",
        "tool results: "
        + ("as <tool_response> user turns" if profile.results_as_text else "natively"),
        "system role: "
        + ("yes" if profile.system_role else "no (system text goes into the first user turn)"),
        "call ids: "
        + (
            "as given"
            if profile.id_style is None and tool_format.id_style != "kimi"
            else f"mapped to the {profile.id_style or tool_format.id_style} shape"
        ),
    ]
    if profile.error:
        lines.append(f"probe: {profile.error}")
    return lines


def _tail(tokenizer: Tokenizer, template: Any, enabled: bool) -> str:
    decision = decide_thinking(template, enabled=enabled)
    rendered = render_chat(
        tokenizer,
        _OPENING,
        template_kwargs=decision.template_kwargs,
        system_switch=decision.system_switch,
    )
    return rendered.tail


def _history(tokenizer: Tokenizer, messages: list[dict], tool_format: ToolCallFormat) -> str:
    """The conversation as the server renders it, without a generation prompt."""
    template = choose_template(tokenizer, None, SAMPLE_TOOLS, False)
    variables = template_variables(
        template, special_tokens(tokenizer), messages, SAMPLE_TOOLS, tool_format
    )
    return render_bounded(template, {**variables, "add_generation_prompt": False})


def written_call(tokenizer: Tokenizer, tool_format: ToolCallFormat) -> str:
    """The sample call as the template writes it in history: the part of the prompt where a
    tool-call turn differs from the same turn with a plain sentinel answer."""
    plain = _history(
        tokenizer, [*_OPENING, {"role": "assistant", "content": _SENTINEL}], tool_format
    )
    called = _history(tokenizer, [*_OPENING, _CALL_TURN], tool_format)
    start = plain.find(_SENTINEL)
    if start < 0:
        return called[len(os.path.commonprefix([plain, called])) :]
    after = len(plain) - start - len(_SENTINEL)
    prefix = min(len(os.path.commonprefix([plain, called])), start)
    suffix = min(len(os.path.commonprefix([plain[::-1], called[::-1]])), after)
    return called[prefix : len(called) - suffix]


def round_trip(tokenizer: Tokenizer, choice: Choice) -> tuple[bool, str]:
    """Cut the sample call out of the rendered history and parse it with the chosen parsers
    (as output after a closed reasoning block): PASS when exactly that call comes back and
    no markup is left over as content."""
    written = written_call(tokenizer, choice.tool_format)
    message = parse_output(
        written,
        reasoning_format=choice.reasoning_format,
        tool_format=choice.tool_format,
        tools=SAMPLE_TOOLS,
    )
    calls = [(c.name, _loads(c.arguments)) for c in message.tool_calls]
    ok = calls == [("get_weather", SAMPLE_ARGUMENTS)] and not (message.content or "").strip()
    return ok, f"written: {written!r}\nparsed: {calls!r}; content: {message.content!r}"


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def report(tokenizer: Tokenizer, choice: Choice) -> tuple[str, bool]:
    """The whole report, and whether the round trip passed."""
    template = getattr(tokenizer, "chat_template", None)
    out = [
        "== parsers",
        f"tool calls: {choice.tool} ({choice.tool_why})",
        f"reasoning: {choice.reasoning or 'none'} ({choice.reasoning_why})",
        "",
        "== thinking switch",
        describe_switch(thinking_key(template)),
    ]
    try:
        chosen = choose_template(tokenizer, None, SAMPLE_TOOLS, False)
    except ChatTemplateError as exc:
        return "\n".join([*out, "", f"no template to render: {exc}"]), False
    profile = profile_template(chosen, special_tokens(tokenizer))
    out += ["", "== tools", *describe_tools(profile, choice.tool_format)]
    try:
        prompt = render_chat(
            tokenizer, SAMPLE_CONVERSATION, tools=SAMPLE_TOOLS, tool_format=choice.tool_format
        )
        out += ["", "== rendered prompt (a tool call and its result)", prompt.text]
        out += ["", "== prompt tail", f"thinking on:  {_tail(tokenizer, template, True)!r}"]
        out.append(f"thinking off: {_tail(tokenizer, template, False)!r}")
        ok, detail = round_trip(tokenizer, choice)
    except ChatTemplateError as exc:
        return "\n".join([*out, "", f"FAIL: the template did not render: {exc}"]), False
    out += ["", "== round trip of the history call", detail, "PASS" if ok else "FAIL"]
    return "\n".join(out), ok
