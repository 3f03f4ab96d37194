"""Render chat messages into the prompt the model continues, with the model's own template.

Rendering happens here, in a bounded Jinja sandbox (jinja_sandbox.py), not in transformers'
``apply_chat_template``: the same environment and variables, plus a bound on steps, time and
size, so neither a model's template nor one from a request can stall the server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .jinja_sandbox import RenderLimitError, RenderLimits, render_bounded
from .tool_prompt import as_plain_chat, template_renders_tools, with_tool_system_prompt

# The tail used when the generation prompt cannot be isolated: enough to hold any opening
# marker a template leaves open (`<think>\n`, `<|channel|>analysis…`).
FALLBACK_TAIL_CHARS = 256


# Variables the renderer sets itself (and transformers' own arguments): a request's
# ``chat_template_kwargs`` may not override them.
RENDERER_KEYS = frozenset(
    {"messages", "conversation", "tools", "documents", "add_generation_prompt"}
    | {"continue_final_message", "tokenize", "return_dict", "return_tensors", "padding"}
    | {"truncation", "max_length", "tokenizer_kwargs", "return_assistant_tokens_mask"}
    | {"sanitize_control_tokens", "raise_exception", "strftime_now", "namespace", "dict"}
    | {"range", "cycler", "joiner", "lipsum"}
)
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
# Longest template a request may bring (models' own are tens of kilobytes at most).
MAX_REQUEST_TEMPLATE_CHARS = 256 * 1024


class ChatTemplateError(ValueError):
    """The messages cannot be rendered (no template, or the template rejected them)."""


class TemplateLimitError(ChatTemplateError):
    """The template went over its step, time or size budget."""


@dataclass
class RenderedPrompt:
    text: str
    token_ids: list[int]
    # The generation prompt the template appended after the last message (e.g.
    # `<|im_start|>assistant\n<think>\n`): parsers and the thinking processor start from it.
    # Earlier turns' closed reasoning blocks are not part of it.
    tail: str


def render_chat(
    tokenizer: Any,
    messages: list[dict],
    *,
    tools: list[dict] | None = None,
    template_kwargs: dict | None = None,
    allow_request_templates: bool = False,
    limits: RenderLimits | None = None,
) -> RenderedPrompt:
    """Render OpenAI-style messages. Tool-call arguments arrive as JSON text and are handed
    to the template as objects, which is what templates (Qwen, Llama, Mistral…) iterate.
    A template that cannot render tools gets them in a system message (tool_prompt.py).
    ``template_kwargs`` come from the request: a ``chat_template`` among them (other than the
    name of one of the model's templates) is used only with ``allow_request_templates``."""
    kwargs = dict(template_kwargs or {})
    owned = sorted(key for key in kwargs if key in RENDERER_KEYS)
    if owned:
        raise ChatTemplateError(
            f"chat_template_kwargs.{owned[0]} is set by the server and cannot be given"
        )
    template = _choose_template(
        tokenizer, kwargs.pop("chat_template", None), tools, allow_request_templates
    )
    if not messages:
        raise ChatTemplateError("there are no messages to render")
    if not template_renders_tools(template):
        messages = as_plain_chat(messages)
        if tools:
            messages, tools = with_tool_system_prompt(messages, tools), None
    variables = {
        **_special_tokens(tokenizer),
        **kwargs,
        "messages": [_for_template(m) for m in messages],
        "tools": tools or None,
        "documents": None,
    }
    text = _render(template, {**variables, "add_generation_prompt": True}, limits)
    history = _render(template, {**variables, "add_generation_prompt": False}, limits)
    tail = text[len(history) :] if text.startswith(history) else text[-FALLBACK_TAIL_CHARS:]
    return RenderedPrompt(text=text, token_ids=encode_prompt(tokenizer, text), tail=tail)


def _render(template: str, variables: dict[str, Any], limits: RenderLimits | None) -> str:
    try:
        return render_bounded(template, variables, limits)
    except RenderLimitError as exc:
        raise TemplateLimitError(f"the chat template was stopped: {exc}") from None
    except Exception as exc:  # jinja raises TemplateError / TypeError / exceptions it defines
        raise ChatTemplateError(
            f"the chat template could not render these messages: {exc}"
        ) from None


def _choose_template(
    tokenizer: Any, requested: Any, tools: list[dict] | None, allow_request_templates: bool
) -> str:
    """The model's template (by name when it has several), or an allowed request's."""
    own = getattr(tokenizer, "chat_template", None)
    named = own if isinstance(own, dict) else {}
    if requested is not None:
        if isinstance(requested, str) and requested in named:
            return named[requested]
        if not allow_request_templates:
            raise ChatTemplateError(
                "chat_template_kwargs.chat_template: this server does not accept chat templates "
                "from requests (the operator can allow them; see docs/security.md)"
            )
        if not isinstance(requested, str):
            raise ChatTemplateError("chat_template_kwargs.chat_template must be a string")
        if len(requested) > MAX_REQUEST_TEMPLATE_CHARS:
            raise ChatTemplateError(
                "chat_template_kwargs.chat_template is over "
                f"{MAX_REQUEST_TEMPLATE_CHARS} characters"
            )
        return requested
    if isinstance(own, str):
        return own
    if tools and "tool_use" in named:
        return named["tool_use"]
    if "default" in named:
        return named["default"]
    raise ChatTemplateError(
        "this model has no chat template; use /v1/completions with a raw prompt"
    )


def _special_tokens(tokenizer: Any) -> dict[str, Any]:
    """``bos_token``, ``eos_token``… as transformers hands them to every template."""
    mapping = getattr(tokenizer, "special_tokens_map", None)
    if isinstance(mapping, dict):
        return dict(mapping)
    names = ("bos_token", "eos_token", "unk_token", "pad_token")
    return {name: getattr(tokenizer, name) for name in names if getattr(tokenizer, name, None)}


def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    """Token ids for prompt text, adding BOS only when the text does not already start with it."""
    bos: str | None = getattr(tokenizer, "bos_token", None)
    add_special = bool(bos) and not text.startswith(bos or "")
    return tokenizer.encode(text, add_special_tokens=add_special)


def _for_template(message: dict) -> dict:
    """A message as templates expect it: no None-valued keys, reasoning under each name
    templates read, tool-call arguments as objects (all as transformers prepares them)."""
    message = {key: value for key, value in message.items() if value is not None}
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
        if isinstance(args, str):
            try:
                function["arguments"] = json.loads(args)
            except json.JSONDecodeError:
                pass  # a template that wants text still gets the text
        converted.append({**call, "function": function})
    return {**message, "tool_calls": converted}
