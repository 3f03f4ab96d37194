"""The protocol-neutral request every API surface is translated into.

A converter (OpenAI chat, Anthropic Messages, Responses, the Python API) only translates
shape: it fills a ``ChatRequest`` with what the client *asked for* (thinking, a token limit
and how to treat it, the sampling fields it set). What that means for this model (the
template's thinking switch, the budget an effort buys, whether ``max_tokens`` fits, the
sampler's final parameters) is decided once, in the pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .constrained import Constraint
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
    """The sampling fields a client set; None means the server's default."""

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
    tools: list[dict] | None = None
    tool_choice: str | dict | None = None
    parallel_tool_calls: bool = True
    constraint: Constraint | None = None  # what the answer must match (any surface's field)
    thinking: Thinking = field(default_factory=Thinking)
    template_kwargs: dict = field(default_factory=dict)  # explicit, over every decision


def check_tool_choice(choice: str | dict | None, tools: list[dict] | None) -> None:
    """``tool_choice`` is one of the four forms and names a tool the request has."""
    if choice in (None, "none", "auto"):
        return
    if not tools:
        raise RequestError("tool_choice requires tools", "tool_choice")
    if choice == "required":
        return
    name = ((choice if isinstance(choice, dict) else {}).get("function") or {}).get("name")
    if not isinstance(choice, dict) or choice.get("type") != "function" or not name:
        raise RequestError(
            'tool_choice must be "none", "auto", "required" or '
            '{"type": "function", "function": {"name": ...}}',
            "tool_choice",
        )
    if name not in {t["function"]["name"] for t in tools}:
        raise RequestError(f"tool_choice names {name!r}, which is not in tools", "tool_choice")
