"""The pipeline that serves the protocol-neutral request (``request.ChatRequest``): decide
what it means for this model (thinking switch and budget, token limit, sampling), render the
prompt, build the constraint chain, generate, parse.

Streaming and non-streaming share one path: a non-streaming answer is the stream consumed to
its end, and its message is the output stream's own assembled message, so the two cannot
disagree.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import aclosing
from dataclasses import dataclass, field

from .chat.stream import OutputStream, make_output_stream
from .chat.template import RenderedPrompt, encode_prompt, render_chat
from .chat.thinking_switch import ThinkingDecision, UnknownEffortError, decide_thinking
from .constrained import Constraint, ConstraintError, build_logits_processors
from .engine.engine import Engine
from .engine.sampling import LogitsProcessor, SamplingParams
from .engine.types import GenerationChunk, GenerationRequest, TokenLogprob
from .families.formats import ReasoningFormat, ToolCallFormat
from .families.message import MessageDelta, ParsedMessage
from .request import (
    ChatRequest,
    MaxTokensPolicy,
    RequestError,
    Sampling,
    check_tool_choice,
)

log = logging.getLogger(__name__)


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # of the prompt tokens, those served from the prefix cache
    reasoning_tokens: int = 0  # of the completion, the reasoning (re-tokenized from its text)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @staticmethod
    def summed(usages: Iterable[Usage]) -> Usage:
        """The usage of several generations (a tool loop's turns) as one."""
        total = Usage()
        for usage in usages:
            total.prompt_tokens += usage.prompt_tokens
            total.completion_tokens += usage.completion_tokens
            total.cached_tokens += usage.cached_tokens
            total.reasoning_tokens += usage.reasoning_tokens
        return total


@dataclass
class ChatEvent:
    """A message delta; the last event of a request carries the finish reason and usage."""

    delta: MessageDelta
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: str | None = None  # stop | length | tool_calls | cancelled | error
    stop_reason: str | int | None = None
    error: str | None = None
    usage: Usage | None = None
    constraint_gave_up: str | None = None  # why enforcing stopped mid-generation, if it did


@dataclass
class ChatResult:
    message: ParsedMessage
    finish_reason: str
    stop_reason: str | int | None
    usage: Usage
    logprobs: list[TokenLogprob]
    error: str | None = None
    constraint_gave_up: str | None = None


@dataclass
class Prepared:
    """A validated request, ready to run: everything that can fail with a 400 has run."""

    generation: GenerationRequest
    output: OutputStream

    def constraint_gave_up(self) -> str | None:
        """Why a constraint stopped enforcing during generation (None: it held, or none)."""
        return _gave_up(self.generation.logits_processors)


def _gave_up(processors: list[LogitsProcessor]) -> str | None:
    for processor in processors:
        reason = getattr(processor, "gave_up", None)
        if reason:
            return reason
    return None


class Pipeline:
    def __init__(
        self,
        engine: Engine,
        *,
        context_length: int,
        default_max_tokens: int,
        reasoning_format: ReasoningFormat | None = None,
        tool_format: ToolCallFormat | None = None,
        structured_backend: str = "auto",
        default_thinking_budget: int | None = None,
        sampling_defaults: SamplingParams | None = None,
        allow_request_templates: bool = False,
    ):
        self.engine = engine
        self.default_thinking_budget = default_thinking_budget
        self.structured_backend = structured_backend
        # whether a request's chat_template_kwargs may carry a template of its own (operator)
        self.allow_request_templates = allow_request_templates
        self.tokenizer = engine.tokenizer
        self.context_length = context_length
        self.default_max_tokens = default_max_tokens
        self.reasoning_format = reasoning_format  # the model's family, resolved by the runtime
        self.tool_format = tool_format
        # what a request that leaves a sampling field unset gets (the CLI's --temperature…)
        self.sampling_defaults = sampling_defaults or SamplingParams()

    # -- preparing -------------------------------------------------------------------------

    def render(self, request: ChatRequest) -> tuple[RenderedPrompt, ThinkingDecision]:
        """The prompt exactly as generation would see it (and ``count_tokens`` counts it):
        tools unless tool_choice is "none", the thinking switch under the template's key."""
        try:
            thinking = decide_thinking(
                getattr(self.tokenizer, "chat_template", None),
                enabled=request.thinking.enabled,
                budget=request.thinking.budget,
                effort=request.thinking.effort,
                template_kwargs=request.template_kwargs,
                default_budget=self.default_thinking_budget,
            )
        except UnknownEffortError as exc:
            raise RequestError(str(exc), "reasoning_effort") from None
        except ValueError as exc:  # a negative budget
            raise RequestError(str(exc), "thinking_token_budget") from None
        prompt = render_chat(
            self.tokenizer,
            request.messages,
            tools=self._tools(request),
            template_kwargs=thinking.template_kwargs,
            allow_request_templates=self.allow_request_templates,
        )
        return prompt, thinking

    @staticmethod
    def _tools(request: ChatRequest) -> list[dict] | None:
        return request.tools if request.tools and request.tool_choice != "none" else None

    def prepare_chat(self, request: ChatRequest) -> Prepared:
        check_tool_choice(request.tool_choice, request.tools)
        prompt, thinking = self.render(request)
        tools = self._tools(request)
        max_tokens = self._fit_max_tokens(
            request.max_tokens, request.max_tokens_policy, len(prompt.token_ids)
        )
        params = request.sampling.resolve(self.sampling_defaults, max_tokens)
        constraint = request.constraint
        # A non-JSON constraint shapes the whole answer: no tool calls are read from it.
        parse_tools = tools and (constraint is None or constraint.is_json)
        tool_format = self.tool_format if parse_tools else None
        try:
            processors = build_logits_processors(
                self.tokenizer,
                constraint=constraint,
                tool_choice=request.tool_choice if request.tools else None,
                tools=tools,
                tool_format=self.tool_format if request.tools else None,
                reasoning_format=self.reasoning_format,
                prompt_tail=prompt.tail,
                thinking_budget=thinking.budget,
                backend=self.structured_backend,
                parallel_tool_calls=request.parallel_tool_calls,
            )
        except ConstraintError as exc:
            raise RequestError(str(exc), exc.param) from None
        output = make_output_stream(
            reasoning_format=self.reasoning_format,
            tool_format=tool_format,
            tools=tools if parse_tools else None,
            prompt_tail=prompt.tail,
        )
        generation = GenerationRequest(prompt.token_ids, params, processors)
        return Prepared(generation, output)

    def prepare_completion(
        self,
        prompt: str | list[int],
        sampling: Sampling,
        max_tokens: int | None,
        constraint: Constraint | None = None,
    ) -> Prepared:
        token_ids = (
            list(prompt) if isinstance(prompt, list) else encode_prompt(self.tokenizer, prompt)
        )
        if not token_ids:
            raise RequestError("prompt must not be empty", "prompt")
        fitted = self._fit_max_tokens(max_tokens, "exact", len(token_ids))
        params = sampling.resolve(self.sampling_defaults, fitted)
        try:
            processors = build_logits_processors(
                self.tokenizer, constraint=constraint, backend=self.structured_backend
            )
        except ConstraintError as exc:
            raise RequestError(str(exc), exc.param) from None
        output = make_output_stream(reasoning_format=None, tool_format=None)
        return Prepared(GenerationRequest(token_ids, params, processors), output)

    def _fit_max_tokens(
        self, requested: int | None, policy: MaxTokensPolicy, prompt_len: int
    ) -> int:
        """The completion's token limit: the server default cut to the room the prompt
        leaves when none was asked; the asked one under ``policy`` otherwise."""
        room = self.context_length - prompt_len
        if room <= 0:
            raise RequestError(
                f"This model's maximum context length is {self.context_length} tokens, "
                f"but the prompt has {prompt_len} tokens.",
                "messages",
            )
        if requested is None:
            return min(self.default_max_tokens, room)
        if policy == "cap":
            return min(requested, room)
        if requested > room:
            raise RequestError(
                f"This model's maximum context length is {self.context_length} tokens. "
                f"However, you requested {prompt_len + requested} tokens "
                f"({prompt_len} in the prompt, {requested} for the completion).",
                "max_tokens",
            )
        return requested

    # -- running ---------------------------------------------------------------------------

    def _count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def stream(self, prepared: Prepared) -> AsyncIterator[ChatEvent]:
        """The request's events; admitted to the engine now, so a full queue is a
        ``QueueFullError`` (429) before a streamed response has started."""
        return self._events_of(prepared, self.engine.generate(prepared.generation))

    async def _events_of(
        self, prepared: Prepared, chunks: AsyncIterator[GenerationChunk]
    ) -> AsyncIterator[ChatEvent]:
        async with aclosing(chunks):  # type: ignore[type-var]
            async for chunk in chunks:
                for event in _events(prepared, chunk, self._count_tokens):
                    yield event

    def stream_sync(self, prepared: Prepared) -> Iterator[ChatEvent]:
        for chunk in self.engine.generate_sync(prepared.generation):
            yield from _events(prepared, chunk, self._count_tokens)

    async def complete(self, prepared: Prepared) -> ChatResult:
        events = [event async for event in self.stream(prepared)]
        return self._result(prepared, events)

    def complete_sync(self, prepared: Prepared) -> ChatResult:
        return self._result(prepared, list(self.stream_sync(prepared)))

    @staticmethod
    def _result(prepared: Prepared, events: list[ChatEvent]) -> ChatResult:
        last = events[-1]
        return ChatResult(
            message=prepared.output.message,
            finish_reason=last.finish_reason or "error",
            stop_reason=last.stop_reason,
            usage=last.usage or Usage(),
            logprobs=[lp for e in events for lp in e.logprobs],
            error=last.error,
            constraint_gave_up=last.constraint_gave_up,
        )


def _events(
    prepared: Prepared, chunk: GenerationChunk, count_tokens: Callable[[str], int]
) -> list[ChatEvent]:
    """The parsed deltas for one engine chunk; a final chunk also flushes the parser, and
    its flushed text travels on the terminal event with the finish reason, the usage and
    a constraint's give-up (logged here, inside the request, so the log line has its id)."""
    output = prepared.output
    delta = output.feed(chunk.text) if chunk.text else MessageDelta()
    if chunk.finish_reason is None:
        return [ChatEvent(delta, chunk.logprobs)]
    events = [ChatEvent(delta, chunk.logprobs)] if delta else []
    reason = chunk.finish_reason
    rest = output.finish()
    if reason == "stop" and output.message.tool_calls:
        reason = "tool_calls"
    reasoning = output.message.reasoning_content
    usage = Usage(
        chunk.prompt_tokens,
        chunk.completion_tokens,
        chunk.cached_tokens,
        count_tokens(reasoning) if reasoning else 0,
    )
    logprobs = [] if events else chunk.logprobs
    gave_up = prepared.constraint_gave_up()
    if gave_up is not None:
        log.warning(
            "generation %s: constraint gave up, output unconstrained from there: %s",
            prepared.generation.request_id,
            gave_up,
        )
    events.append(ChatEvent(rest, logprobs, reason, chunk.stop_reason, chunk.error, usage, gave_up))
    return events
