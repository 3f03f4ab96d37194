"""The one internal request every API surface is translated into, and the pipeline that
serves it: render the prompt, build the constraint chain, generate, parse.

Streaming and non-streaming share one path: a non-streaming answer is the stream consumed to
its end, and its message is the output stream's own assembled message, so the two cannot
disagree.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .chat.message import MessageDelta, ParsedMessage
from .chat.stream import OutputStream, make_output_stream
from .chat.template import encode_prompt, render_chat
from .chat.thinking_switch import decide_thinking
from .constrained import ConstraintError, build_logits_processors
from .engine.boundaries import history_end
from .engine.engine import Engine
from .engine.sampling import SamplingParams
from .engine.types import GenerationChunk, GenerationRequest, TokenLogprob


class RequestError(ValueError):
    """The request is invalid for this model (the HTTP layer answers 400 with ``param``)."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


@dataclass
class ChatRequest:
    messages: list[dict]
    params: SamplingParams
    tools: list[dict] | None = None
    tool_choice: str | dict | None = None
    response_format: dict | None = None
    template_kwargs: dict = field(default_factory=dict)
    max_tokens_given: bool = False
    thinking_budget: int | None = None  # explicit cap on reasoning tokens
    reasoning_effort: str | None = None  # OpenAI: none | minimal | low | medium | high
    thinking: Any = None  # Anthropic {"type": "enabled"|"disabled", "budget_tokens": N}
    parallel_tool_calls: bool = True


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


@dataclass
class ChatResult:
    message: ParsedMessage
    finish_reason: str
    stop_reason: str | int | None
    usage: Usage
    logprobs: list[TokenLogprob]
    error: str | None = None


@dataclass
class Prepared:
    """A validated request, ready to run: everything that can fail with a 400 has run."""

    generation: GenerationRequest
    output: OutputStream


class Pipeline:
    def __init__(
        self,
        engine: Engine,
        *,
        context_length: int,
        default_max_tokens: int,
        reasoning_parser: str | None = None,
        tool_parser: str | None = None,
        structured_backend: str = "auto",
        default_thinking_budget: int | None = None,
    ):
        self.engine = engine
        self.default_thinking_budget = default_thinking_budget
        self.structured_backend = structured_backend
        self.tokenizer = engine.tokenizer
        self.context_length = context_length
        self.default_max_tokens = default_max_tokens
        self.reasoning_parser = reasoning_parser
        self.tool_parser = tool_parser

    # -- preparing -------------------------------------------------------------------------

    def prepare_chat(self, request: ChatRequest) -> Prepared:
        calls_allowed = bool(request.tools) and request.tool_choice != "none"
        tools = request.tools if calls_allowed else None
        try:
            thinking = decide_thinking(
                getattr(self.tokenizer, "chat_template", None),
                thinking=request.thinking,
                reasoning_effort=request.reasoning_effort,
                chat_template_kwargs=request.template_kwargs,
                thinking_token_budget=request.thinking_budget,
                default_budget=self.default_thinking_budget,
            )
        except ValueError as exc:
            raise RequestError(str(exc), "reasoning_effort") from None
        prompt = render_chat(
            self.tokenizer, request.messages, tools=tools, template_kwargs=thinking.template_kwargs
        )
        params = self._fit_max_tokens(
            request.params, len(prompt.token_ids), request.max_tokens_given
        )
        tool_parser = self.tool_parser if calls_allowed else None
        try:
            processors = build_logits_processors(
                self.tokenizer,
                response_format=request.response_format,
                tool_choice=request.tool_choice if calls_allowed else None,
                tools=tools,
                tool_parser=tool_parser,
                reasoning_parser=self.reasoning_parser,
                prompt_tail=prompt.tail,
                thinking_budget=thinking.budget,
                backend=self.structured_backend,
                parallel_tool_calls=request.parallel_tool_calls,
            )
        except ConstraintError as exc:
            raise RequestError(str(exc), "response_format") from None
        output = make_output_stream(
            reasoning_parser=self.reasoning_parser,
            tool_parser=tool_parser,
            tools=tools,
            prompt_tail=prompt.tail,
        )
        generation = GenerationRequest(
            prompt.token_ids,
            params,
            processors,
            checkpoints=history_end(self.tokenizer, prompt.token_ids, prompt.tail),
        )
        return Prepared(generation, output)

    def prepare_completion(
        self, prompt: str | list[int], params: SamplingParams, max_tokens_given: bool
    ) -> Prepared:
        token_ids = (
            list(prompt) if isinstance(prompt, list) else encode_prompt(self.tokenizer, prompt)
        )
        if not token_ids:
            raise RequestError("prompt must not be empty", "prompt")
        params = self._fit_max_tokens(params, len(token_ids), max_tokens_given)
        output = make_output_stream(reasoning_parser=None, tool_parser=None)
        return Prepared(GenerationRequest(token_ids, params), output)

    def _fit_max_tokens(
        self, params: SamplingParams, prompt_len: int, given: bool
    ) -> SamplingParams:
        room = self.context_length - prompt_len
        if room <= 0:
            raise RequestError(
                f"This model's maximum context length is {self.context_length} tokens, "
                f"but the prompt has {prompt_len} tokens.",
                "messages",
            )
        if given and params.max_tokens > room:
            raise RequestError(
                f"This model's maximum context length is {self.context_length} tokens. "
                f"However, you requested {prompt_len + params.max_tokens} tokens "
                f"({prompt_len} in the prompt, {params.max_tokens} for the completion).",
                "max_tokens",
            )
        if not given:
            params.max_tokens = min(self.default_max_tokens, room)
        return params

    # -- running ---------------------------------------------------------------------------

    def _count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    async def stream(self, prepared: Prepared) -> AsyncIterator[ChatEvent]:
        async for chunk in self.engine.generate(prepared.generation):
            for event in _events(prepared.output, chunk, self._count_tokens):
                yield event

    def stream_sync(self, prepared: Prepared) -> Iterator[ChatEvent]:
        for chunk in self.engine.generate_sync(prepared.generation):
            yield from _events(prepared.output, chunk, self._count_tokens)

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
        )


def _events(
    output: OutputStream, chunk: GenerationChunk, count_tokens: Callable[[str], int]
) -> list[ChatEvent]:
    """The parsed deltas for one engine chunk; a final chunk also flushes the parser, and
    its flushed text travels on the terminal event with the finish reason and usage."""
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
    events.append(ChatEvent(rest, logprobs, reason, chunk.stop_reason, chunk.error, usage))
    return events
