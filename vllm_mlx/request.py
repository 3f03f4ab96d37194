"""The protocol-neutral request every API surface is translated into.

A converter (OpenAI chat, Anthropic Messages, Responses, the Python API) only translates
shape: it fills a ``ChatRequest`` with what the client *asked for* (thinking, a token limit
and how to treat it, the sampling fields it set). What that means for this model (the
template's thinking switch, the budget an effort buys, whether ``max_tokens`` fits, the
sampler's final parameters) is decided once, in the pipeline.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal

from .constrained import Constraint
from .constrained.custom_tools import CustomTool
from .engine.sampling import SamplingParams

# exact: a limit that does not fit the context is a 400 (OpenAI).
# cap: the limit is an upper bound, cut to what the context leaves (Anthropic: Claude Code
# asks for 32000 whatever the model's context).
MaxTokensPolicy = Literal["exact", "cap"]


class RequestError(ValueError):
    """The request is invalid for this model (the HTTP layer answers 400 with ``param``).

    ``param`` uses the chat-completions field names; each surface maps them to its own."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class ContextLengthError(RequestError):
    """The prompt (with the completion asked for, if any) does not fit the context.

    It carries the numbers, not wording: each surface says it in the words its clients act
    on (Anthropic's ``prompt is too long: N tokens > M maximum``, OpenAI's
    ``context_length_exceeded``), in one place per surface."""

    code = "context_length_exceeded"

    def __init__(self, prompt_tokens: int, context_length: int, completion_tokens: int = 0):
        self.prompt_tokens = prompt_tokens
        self.context_length = context_length
        self.completion_tokens = completion_tokens  # the limit asked for (0: none asked)
        total = prompt_tokens + completion_tokens
        super().__init__(
            f"This model's maximum context length is {context_length} tokens, "
            f"but the request needs {total}.",
            "max_tokens" if completion_tokens else "messages",
        )


@dataclass(frozen=True)
class ImageSource:
    """An image as a request carried it: base64 ``data`` (with its media type) or a ``url``
    (``data:`` or a network URL), with OpenAI's ``detail`` when given."""

    data: str | None = None
    media_type: str | None = None
    url: str | None = None
    detail: str | None = None


@dataclass(frozen=True)
class OmittedMedia:
    """An image, document, audio or file part a converter replaced by a placeholder (an
    image with its ``source``, which a vision model reads in its place)."""

    kind: str  # image | document | audio | file
    param: str  # where it was, in the surface's own field names
    source: ImageSource | None = None


_omitted: ContextVar[list[OmittedMedia] | None] = ContextVar("omitted_media", default=None)
# Image markers carry a per-process secret, so text a client writes cannot pose as one.
_MARK = f"\ue000{secrets.token_hex(8)}:"
_MARKER = re.compile(re.escape(_MARK) + r"(\d+)\ue001")


@contextmanager
def collecting_media() -> Iterator[list[OmittedMedia]]:
    """Collect the media parts converters replace while converting one request (so deep
    converter helpers need not pass a list down); the pipeline decides what they mean."""
    omitted: list[OmittedMedia] = []
    token = _omitted.set(omitted)
    try:
        yield omitted
    finally:
        _omitted.reset(token)


def media_placeholder(kind: str, param: str, source: ImageSource | None = None) -> str:
    """The text standing for a media part (recorded for the pipeline: ``--unsupported-media
    reject`` turns it into a 400 naming ``param``). An image with a ``source`` leaves a
    marker the pipeline replaces: with the model's image text for a vision model, with the
    placeholder for a text-only one."""
    omitted = _omitted.get()
    if omitted is not None:
        omitted.append(OmittedMedia(kind, param, source))
        if source is not None:
            return f"{_MARK}{len(omitted) - 1}\ue001"
    return omitted_text(kind)


def omitted_text(kind: str) -> str:
    """What a text-only model sees instead of a media part."""
    return f"[{kind} omitted: this model reads text only]"


def replace_markers(messages: list[dict], write: Callable[[int], str]) -> list[dict]:
    """``messages`` with each image marker replaced by ``write(index)`` (index into the
    request's ``omitted_media``); messages without markers are returned as they are."""
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str) and _MARK in content:
            message = {**message, "content": _MARKER.sub(lambda m: write(int(m.group(1))), content)}
        out.append(message)
    return out


@dataclass(frozen=True)
class Thinking:
    """What the client asked of reasoning; a None field was not asked (template default).

    ``enabled`` switches thinking on or off; ``budget`` caps reasoning tokens; ``effort``
    (none | minimal | low | medium | high | xhigh) stands for both, through the one table
    in ``chat/thinking_switch.py``. An explicit ``enabled``/``budget`` wins over ``effort``.
    """

    enabled: bool | None = None
    budget: int | None = None
    effort: str | None = None


@dataclass
class Sampling:
    """The sampling fields a client set, as its API carried them; a None knob takes the
    server's default (``resolve``: into the engine's ``SamplingParams``). Its own type, not
    an optional ``SamplingParams``, because "unset" must survive until the pipeline decides
    over the model's defaults; the per-request fields (seed, stop, bias, logprobs) have no
    server default."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[int, float] = field(default_factory=dict)
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    logprobs: bool = False
    top_logprobs: int = 0

    def resolve(self, defaults: SamplingParams, max_tokens: int) -> SamplingParams:
        """The sampler's parameters: these fields over the server's defaults."""

        def pick(value, default):
            return default if value is None else value

        return SamplingParams(
            max_tokens=max_tokens,
            temperature=pick(self.temperature, defaults.temperature),
            top_p=pick(self.top_p, defaults.top_p),
            top_k=max(pick(self.top_k, defaults.top_k), 0),  # -1 (OpenAI-style "off") is 0
            min_p=pick(self.min_p, defaults.min_p),
            repetition_penalty=pick(self.repetition_penalty, defaults.repetition_penalty),
            presence_penalty=pick(self.presence_penalty, defaults.presence_penalty),
            frequency_penalty=pick(self.frequency_penalty, defaults.frequency_penalty),
            logit_bias=dict(self.logit_bias),
            seed=self.seed,
            stop=list(self.stop),
            stop_token_ids=list(self.stop_token_ids),
            logprobs=self.logprobs,
            top_logprobs=self.top_logprobs,
        )


@dataclass
class ChatRequest:
    """One chat request's intent, whatever API it came through.

    Messages are OpenAI chat messages (content as text, tool calls with JSON-string
    arguments); ``tools`` are OpenAI function tools; ``tool_choice`` is
    none | auto | required | {"type": "function", "function": {"name": ...}}. ``constraint``
    is the one output constraint, from whichever field carried it (``response_format``,
    ``structured_outputs``, ``guided_*``, ``output_format``, ``text.format``…)."""

    messages: list[dict]
    sampling: Sampling = field(default_factory=Sampling)
    max_tokens: int | None = None  # None: the server's default, cut to the context
    max_tokens_policy: MaxTokensPolicy = "exact"
    # the client's own bound on prompt + completion, below the model's context (Ollama's
    # num_ctx); None: the model's context
    context_limit: int | None = None
    tools: list[dict] | None = None
    tool_choice: str | dict | None = None
    parallel_tool_calls: bool = True
    constraint: Constraint | None = None  # what the answer must match (any surface's field)
    thinking: Thinking = field(default_factory=Thinking)
    template_kwargs: dict = field(default_factory=dict)  # explicit, over every decision
    omitted_media: list[OmittedMedia] = field(default_factory=list)  # placeholders in messages
    # custom (free-form) tools: in ``tools`` in function form; here, what their input
    # must match (constrained/custom_tools.py)
    custom_tools: list[CustomTool] = field(default_factory=list)


def check_tool_choice(choice: object, tools: list[dict] | None) -> None:
    """``tool_choice`` is one of the four forms and names a tool the request has."""
    if choice in (None, "none", "auto"):
        return
    if not tools:
        raise RequestError("tool_choice requires tools", "tool_choice")
    if choice == "required":
        return
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if (
        not isinstance(choice, dict)
        or choice.get("type") != "function"
        or not isinstance(name, str)
        or not name
    ):
        raise RequestError(
            'tool_choice must be "none", "auto", "required" or '
            '{"type": "function", "function": {"name": ...}}',
            "tool_choice",
        )
    if name not in {t["function"]["name"] for t in tools}:
        raise RequestError(f"tool_choice names {name!r}, which is not in tools", "tool_choice")


SEED_LIMIT = 2**64  # the sampler's random key is an unsigned 64-bit integer


def check_sampling(sampling: Sampling, vocab_size: int) -> None:
    """Every token id a client sent is an id of this vocabulary, and the seed fits the
    sampler: an id past the embedding reaches native code (a crash, not an error), and a
    negative one would index from the end."""
    for token in sampling.logit_bias:
        _check_id(token, vocab_size, "logit_bias")
    _check_ids(sampling.stop_token_ids, vocab_size, "stop_token_ids")
    if sampling.seed is not None and not 0 <= sampling.seed < SEED_LIMIT:
        raise RequestError(f"seed must be between 0 and {SEED_LIMIT - 1}", "seed")


def check_prompt_ids(token_ids: list[int], vocab_size: int) -> None:
    """Prompt token ids (a completions prompt given as ids) are ids of this vocabulary."""
    _check_ids(token_ids, vocab_size, "prompt")


def _check_ids(token_ids: list[int], vocab_size: int, param: str) -> None:
    if token_ids and (min(token_ids) < 0 or max(token_ids) >= vocab_size):
        bad = next(t for t in token_ids if not 0 <= t < vocab_size)
        _check_id(bad, vocab_size, param)


def _check_id(token: int, vocab_size: int, param: str) -> None:
    if not 0 <= token < vocab_size:
        shown = str(token) if len(str(token)) <= 24 else str(token)[:20] + "..."
        raise RequestError(
            f"{param}: token id {shown} is not in this model's vocabulary "
            f"(ids are 0 to {vocab_size - 1})",
            param,
        )


@dataclass(frozen=True)
class RequestLimits:
    """Size bounds checked before anything is rendered or tokenized (docs/security.md),
    so an oversized request costs a count, not seconds of event-loop time."""

    max_prompt_chars: int = 2_000_000  # text in messages and tools, or a raw prompt
    max_messages: int = 10_000
    max_tools: int = 512


def check_size(request: ChatRequest, limits: RequestLimits) -> None:
    """The request is within ``limits``: messages, tools, then characters (cheapest first)."""
    if len(request.messages) > limits.max_messages:
        raise RequestError(
            f"{len(request.messages)} messages; this server accepts at most "
            f"{limits.max_messages} (--max-messages)",
            "messages",
        )
    if len(request.tools or ()) > limits.max_tools:
        raise RequestError(
            f"{len(request.tools or ())} tools; this server accepts at most "
            f"{limits.max_tools} (--max-tools)",
            "tools",
        )
    chars = text_chars(request.messages) + text_chars(request.tools)
    if chars > limits.max_prompt_chars:
        raise RequestError(_too_long(chars, limits), "messages")


def check_prompt_size(prompt: str | list[int], limits: RequestLimits) -> None:
    """A raw completions prompt (text, or ids counted as one character each) is in bounds."""
    check_chars(len(prompt), limits)


def check_chars(chars: int, limits: RequestLimits, param: str = "prompt") -> None:
    """``chars`` characters of prompt text are within ``limits``."""
    if chars > limits.max_prompt_chars:
        raise RequestError(_too_long(chars, limits), param)


def _too_long(chars: int, limits: RequestLimits) -> str:
    return (
        f"the prompt has {chars} characters; this server accepts at most "
        f"{limits.max_prompt_chars} (--max-prompt-chars)"
    )


def text_chars(value: object) -> int:
    """Characters in every string (keys included) of a JSON-like value, without recursion."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            total += sum(len(k) for k in item if isinstance(k, str))
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return total


@dataclass
class Infill:
    """A fill-in-the-middle request: the code around the gap, and files for context.

    ``prompt`` is text that continues the prefix right before the gap (llama.cpp's
    ``/infill`` ``prompt``); ``extra`` holds (file name, text) pairs of other files."""

    prefix: str
    suffix: str
    prompt: str = ""
    extra: list[tuple[str, str]] = field(default_factory=list)

    def chars(self) -> int:
        parts = [self.prefix, self.suffix, self.prompt, *(n + t for n, t in self.extra)]
        return sum(len(part) for part in parts)
