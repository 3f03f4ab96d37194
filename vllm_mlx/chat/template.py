"""Render chat messages into the prompt the model continues, with the model's own template."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .tool_prompt import as_plain_chat, template_renders_tools, with_tool_system_prompt

# The tail used when the generation prompt cannot be isolated: enough to hold any opening
# marker a template leaves open (`<think>\n`, `<|channel|>analysis…`).
FALLBACK_TAIL_CHARS = 256


class ChatTemplateError(ValueError):
    """The messages cannot be rendered (no template, or the template rejected them)."""


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
) -> RenderedPrompt:
    """Render OpenAI-style messages. Tool-call arguments arrive as JSON text and are handed
    to the template as objects, which is what templates (Qwen, Llama, Mistral…) iterate.
    A template that cannot render tools gets them in a system message (tool_prompt.py)."""
    template = getattr(tokenizer, "chat_template", None)
    if template is None:
        raise ChatTemplateError(
            "this model has no chat template; use /v1/completions with a raw prompt"
        )
    if not template_renders_tools(template):
        messages = as_plain_chat(messages)
        if tools:
            messages, tools = with_tool_system_prompt(messages, tools), None
    rendered = [_for_template(m) for m in messages]
    kwargs = {"tools": tools or None, "tokenize": False, **(template_kwargs or {})}
    try:
        text = tokenizer.apply_chat_template(rendered, add_generation_prompt=True, **kwargs)
        history = tokenizer.apply_chat_template(rendered, add_generation_prompt=False, **kwargs)
    except Exception as exc:  # jinja raises TemplateError / TypeError / exceptions it defines
        raise ChatTemplateError(
            f"the chat template could not render these messages: {exc}"
        ) from None
    tail = text[len(history) :] if text.startswith(history) else text[-FALLBACK_TAIL_CHARS:]
    return RenderedPrompt(text=text, token_ids=encode_prompt(tokenizer, text), tail=tail)


def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    """Token ids for prompt text, adding BOS only when the text does not already start with it."""
    bos = getattr(tokenizer, "bos_token", None)
    add_special = bool(bos) and not text.startswith(bos)
    return tokenizer.encode(text, add_special_tokens=add_special)


def _for_template(message: dict) -> dict:
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
