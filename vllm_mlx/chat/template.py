"""Render chat messages into the prompt the model continues, with the model's own template.

Rendering happens here, in a bounded Jinja sandbox (jinja_sandbox.py), not in transformers'
``apply_chat_template``: the same environment and variables, plus a bound on steps, time and
size, so neither a model's template nor one from a request can stall the server.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from vllm_mlx.families.formats import ToolCallFormat

from ..protocols import Tokenizer
from .jinja_sandbox import RenderLimitError, RenderLimits, render_bounded
from .message_passes import Fitting, fit_messages
from .template_kwargs import ChatTemplateError, check_template_kwargs
from .template_probe import profile_template

# The tail used when the generation prompt cannot be isolated: enough to hold any opening
# marker a template leaves open (`<think>\n`, `<|channel|>analysis…`).
FALLBACK_TAIL_CHARS = 256


_TAIL_PROBE = "vmx tail probe"
# Longest template a request may bring (models' own are tens of kilobytes at most).
MAX_REQUEST_TEMPLATE_CHARS = 256 * 1024


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
    # A vision model's images as it reads them (engine/vision.VisionInput), else None
    vision: Any = None


def render_chat(
    tokenizer: Tokenizer,
    messages: list[dict],
    *,
    tools: list[dict] | None = None,
    template_kwargs: dict | None = None,
    allow_request_templates: bool = False,
    limits: RenderLimits | None = None,
    tool_format: ToolCallFormat | None = None,
    system_switch: str | None = None,
) -> RenderedPrompt:
    """Render OpenAI-style messages in the forms the template accepts (its `TemplateProfile`):
    content never null, arguments as objects or JSON text, ids in the shape it enforces,
    system text in the first user turn when it has no system role. Tools, calls and results it
    cannot show are written in ``tool_format``'s syntax (tool_prompt.py). ``system_switch``
    (``/no_think``) is appended to the system prompt. ``template_kwargs`` come from the
    request: a ``chat_template`` among them (other than the name of one of the model's
    templates) is used only with ``allow_request_templates``."""
    kwargs = dict(template_kwargs or {})
    check_template_kwargs(kwargs)
    template = choose_template(
        tokenizer, kwargs.pop("chat_template", None), tools, allow_request_templates
    )
    if not messages:
        raise ChatTemplateError("there are no messages to render")
    variables = template_variables(
        template, special_tokens(tokenizer), messages, tools, tool_format, system_switch
    )
    variables = {**variables, **kwargs}
    text = _render(template, {**variables, "add_generation_prompt": True}, limits)
    history = _render(template, {**variables, "add_generation_prompt": False}, limits)
    tail = text[len(history) :] if text.startswith(history) else text[-FALLBACK_TAIL_CHARS:]
    if not tail and text:
        tail = _printed_tail(template, variables, text, limits)
    return RenderedPrompt(text=text, token_ids=encode_prompt(tokenizer, text), tail=tail)


def _printed_tail(
    template: str, variables: dict[str, Any], text: str, limits: RenderLimits | None
) -> str:
    """The tail of a template that prints its generation prompt whatever
    ``add_generation_prompt`` says (Command R7B, Apriel 1.6): what follows the point where
    the prompt and the same conversation with one more assistant turn part ways."""
    probe = {"role": "assistant", "content": _TAIL_PROBE}
    more = {**variables, "messages": [*variables["messages"], probe]}
    try:
        longer = _render(template, {**more, "add_generation_prompt": False}, limits)
    except ChatTemplateError:
        return text[-FALLBACK_TAIL_CHARS:]
    shared = len(os.path.commonprefix([text, longer]))
    return text[shared:] if _TAIL_PROBE in longer[shared:] else text[-FALLBACK_TAIL_CHARS:]


def template_variables(
    template: str,
    specials: dict[str, Any],
    messages: list[dict],
    tools: list[dict] | None,
    tool_format: ToolCallFormat | None = None,
    system_switch: str | None = None,
) -> dict[str, Any]:
    """The variables the template renders (without ``add_generation_prompt``): the
    messages fitted to the template's profile (``message_passes.py``), the tools where it
    reads them, the special tokens."""
    profile = profile_template(template, specials)
    fitting = Fitting(profile, tools, tool_format, system_switch)
    tool_kwargs: dict[str, Any] = {}
    if tools and profile.tools_via not in (None, "message"):  # else the passes place them
        tool_kwargs[profile.tools_via or "tools"] = tools
    elif not tools and profile.tools_none_ok:
        tool_kwargs["tools"] = None
    return {
        **specials,
        **tool_kwargs,
        "messages": fit_messages(messages, fitting),
        "documents": None,
    }


def _render(template: str, variables: dict[str, Any], limits: RenderLimits | None) -> str:
    try:
        return render_bounded(template, variables, limits)
    except RenderLimitError as exc:
        raise TemplateLimitError(f"the chat template was stopped: {exc}") from None
    except Exception as exc:  # jinja raises TemplateError / TypeError / exceptions it defines
        raise ChatTemplateError(
            f"the chat template could not render these messages: {exc}"
        ) from None


def choose_template(
    tokenizer: Tokenizer, requested: Any, tools: list[dict] | None, allow_request_templates: bool
) -> str:
    """The model's template (by name when it has several), or an allowed request's."""
    own = getattr(tokenizer, "chat_template", None)
    named = named_templates(own)
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
    if named:
        return next(iter(named.values()))
    raise ChatTemplateError(
        "this model has no chat template; use /v1/completions with a raw prompt"
    )


def named_templates(own: Any) -> dict[str, str]:
    """A model's named templates: ``{"default": …, "tool_use": …}`` as transformers keeps
    them, or the ``[{"name": …, "template": …}]`` list of a tokenizer_config.json."""
    if isinstance(own, dict):
        return {str(k): v for k, v in own.items() if isinstance(v, str)}
    if isinstance(own, list):
        return {
            str(item["name"]): item["template"]
            for item in own
            if isinstance(item, dict) and isinstance(item.get("template"), str) and "name" in item
        }
    return {}


def template_sources(own: Any) -> list[str]:
    """Every template text a tokenizer holds (one, or each named one)."""
    return [own] if isinstance(own, str) else list(named_templates(own).values())


def special_tokens(tokenizer: Tokenizer) -> dict[str, Any]:
    """``bos_token``, ``eos_token``… as transformers hands them to every template."""
    mapping = getattr(tokenizer, "special_tokens_map", None)
    if isinstance(mapping, dict):
        return dict(mapping)
    names = ("bos_token", "eos_token", "unk_token", "pad_token")
    return {name: getattr(tokenizer, name) for name in names if getattr(tokenizer, name, None)}


def encode_prompt(tokenizer: Tokenizer, text: str) -> list[int]:
    """Token ids for prompt text, adding BOS only when the text does not already start with it."""
    bos: str | None = getattr(tokenizer, "bos_token", None)
    add_special = bool(bos) and not text.startswith(bos or "")
    return tokenizer.encode(text, add_special_tokens=add_special)
