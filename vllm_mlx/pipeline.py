"""The pipeline that serves the protocol-neutral request (``request.ChatRequest``): decide
what it means for this model (thinking switch and budget, token limit, sampling), render the
prompt, build the constraint chain, generate, parse.

Streaming and non-streaming share one path: a non-streaming answer is the stream consumed to
its end, and its message is the output stream's own assembled message, so the two cannot
disagree.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import functools
import logging
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import Any

from .chat.custom_tools import RawCallStream
from .chat.fim import fim_format, fim_prompt, stop_ids
from .chat.images import DecodedImage, ImageError, read_image
from .chat.stream import OutputStream, make_output_stream
from .chat.template import (
    MAX_REQUEST_TEMPLATE_CHARS,
    RenderedPrompt,
    encode_prompt,
    named_templates,
    render_chat,
)
from .chat.thinking_switch import ThinkingDecision, UnknownEffortError, decide_thinking
from .chat.vision_prompt import VisionPrompter
from .constrained import Constraint, ConstraintError, build_logits_processors
from .constrained.custom_tools import CustomTool, check_grammars, forced_raw, input_mismatch
from .constrained.tokenizer_cache import token_count
from .engine.boundaries import history_end
from .engine.engine import Engine
from .engine.generation import (
    AdapterChoice,
    GenerationChunk,
    GenerationError,
    GenerationRequest,
    TokenLogprob,
)
from .engine.sampling import SamplingParams
from .families.fim import FimFormat
from .families.formats import ReasoningFormat, ToolCallFormat
from .families.message import MessageDelta, ParsedMessage
from .options import RuntimeOptions
from .protocols import LogitsProcessor, Tokenizer
from .request import (
    ChatRequest,
    ContextLengthError,
    Infill,
    MaxTokensPolicy,
    RequestError,
    Sampling,
    check_chars,
    check_prompt_ids,
    check_prompt_size,
    check_sampling,
    check_size,
    check_tool_choice,
    omitted_text,
    replace_markers,
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
    """A message delta; the last event of a request carries the finish reason and the final
    usage (earlier events carry the usage so far: the prompt split and tokens to date)."""

    delta: MessageDelta
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: str | None = None  # stop | length | tool_calls | cancelled | error
    stop_reason: str | int | None = None
    error: GenerationError | None = None  # why a generation ended with "error"
    usage: Usage | None = None
    constraint_gave_up: str | None = None  # why enforcing stopped mid-generation, if it did


@dataclass
class ChatResult:
    message: ParsedMessage
    finish_reason: str
    stop_reason: str | int | None
    usage: Usage
    logprobs: list[TokenLogprob]
    error: GenerationError | None = None
    constraint_gave_up: str | None = None


@dataclass
class Prepared:
    """A validated request, ready to run: everything that can fail with a 400 has run."""

    generation: GenerationRequest
    output: OutputStream
    # a check of the finished message (custom-tool inputs against their grammars)
    check: Callable[[ParsedMessage], str | None] | None = None

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
        options: RuntimeOptions | None = None,
        reasoning_format: ReasoningFormat | None = None,
        tool_format: ToolCallFormat | None = None,
        sampling_defaults: SamplingParams | None = None,
        vocab_size: int | None = None,
        vision: VisionPrompter | None = None,
    ):
        self.engine = engine
        # the operator's choices: token limits, thinking budget, backend, what a request
        # may carry (its own template; media on this text-only model), size limits
        self.options = options or RuntimeOptions()
        self.tokenizer = engine.tokenizer
        self.adapter: AdapterChoice | None = None  # what with_adapter's copies run under
        self.context_length = context_length
        self.reasoning_format = reasoning_format  # the model's family, resolved by the runtime
        self.tool_format = tool_format
        # what a request that leaves a sampling field unset gets (the CLI's --temperature…
        # over the model's own)
        self.sampling_defaults = sampling_defaults or SamplingParams()
        # the bound for every token id a client sends: the runtime passes the smaller of the
        # tokenizer's and the model's embedding size (an id past the embedding crashes it)
        self.vocab_size = vocab_size or token_count(self.tokenizer)
        # a vision-language model's prompt builder (None: the model reads text only)
        self.vision = vision
        # told the usage of a generation its consumer left before the end (a client that
        # disconnected): the server counts it as cancelled, with the tokens it cost
        self.on_cancelled: Callable[[Usage], None] | None = None

    @property
    def structured_backend(self) -> str:
        return self.options.request.structured_output_backend

    def with_adapter(self, adapter: AdapterChoice, chat_template: str | None) -> Pipeline:
        """This pipeline for requests under ``adapter``: the same engine, parsers and
        defaults (the base's), its prompts rendered with the adapter folder's own chat
        template when it carries one."""
        view = copy.copy(self)
        view.adapter = adapter
        if chat_template is not None:
            view.tokenizer = _WithTemplate(self.tokenizer, chat_template)
        return view

    # -- preparing -------------------------------------------------------------------------

    def render(self, request: ChatRequest) -> tuple[RenderedPrompt, ThinkingDecision]:
        """The prompt exactly as generation would see it (and ``count_tokens`` counts it):
        tools unless tool_choice is "none", the thinking switch under the template's key.
        Sizes are checked first, so an oversized request is refused before any rendering."""
        check_size(request, self.options.limits)
        try:
            thinking = decide_thinking(
                self._switch_template(request),
                enabled=request.thinking.enabled,
                budget=request.thinking.budget,
                effort=request.thinking.effort,
                template_kwargs=request.template_kwargs,
                default_budget=self.options.request.default_thinking_token_budget,
                default_kwargs=self.options.request.chat_template_kwargs,
            )
        except UnknownEffortError as exc:
            raise RequestError(str(exc), "reasoning_effort") from None
        except ValueError as exc:  # a negative budget
            raise RequestError(str(exc), "thinking_token_budget") from None
        messages, images = self._media(request)
        prompt = render_chat(
            self.tokenizer,
            messages,
            tools=self._tools(request),
            template_kwargs=thinking.template_kwargs,
            allow_request_templates=self.options.request.allow_request_chat_templates,
            tool_format=self.tool_format,
            system_switch=thinking.system_switch,
        )
        if images and self.vision is not None:
            try:
                ids, vision = self.vision.encode(
                    prompt.text, images, self.options.images, self.tokenizer
                )
            except ImageError as exc:
                raise RequestError(str(exc), exc.param) from None
            prompt = dataclasses.replace(prompt, token_ids=ids, vision=vision)
        return prompt, thinking

    def _media(self, request: ChatRequest) -> tuple[list[dict], list[DecodedImage]]:
        """The messages with each image marker written out: the model's image text and the
        decoded image (in the order the messages show them) for a vision model, the
        omitted-media placeholder for a text-only one."""
        media = request.omitted_media
        if self.vision is None:
            return replace_markers(request.messages, lambda i: omitted_text("image")), []
        count = sum(1 for m in media if m.source is not None)
        if count > self.options.images.max_images:
            raise RequestError(
                f"{count} images; this server accepts at most "
                f"{self.options.images.max_images} per request (--max-images)",
                "messages",
            )
        images: list[DecodedImage] = []

        def write(index: int) -> str:
            item = media[index]
            assert item.source is not None
            try:
                images.append(
                    read_image(
                        data=item.source.data,
                        url=item.source.url,
                        param=item.param,
                        limits=self.options.images,
                        detail=item.source.detail,
                    )
                )
            except ImageError as exc:
                raise RequestError(str(exc), exc.param) from None
            assert self.vision is not None
            return self.vision.image_text

        return replace_markers(request.messages, write), images

    def _switch_template(self, request: ChatRequest) -> Any:
        """The template whose thinking switch applies: a request's own template (or one of
        the model's named ones it asks for), else the model's."""
        own = getattr(self.tokenizer, "chat_template", None)
        requested = (request.template_kwargs or {}).get("chat_template")
        named = named_templates(own)
        if isinstance(requested, str) and requested in named:
            return named[requested]
        if (
            isinstance(requested, str)
            and self.options.request.allow_request_chat_templates
            and len(requested) <= MAX_REQUEST_TEMPLATE_CHARS
        ):
            return requested
        return own

    @staticmethod
    def _tools(request: ChatRequest) -> list[dict] | None:
        return request.tools if request.tools and request.tool_choice != "none" else None

    def prepare_chat(self, request: ChatRequest) -> Prepared:
        """Everything that can fail with a 400, then the generation request. It renders and
        tokenizes (and compiles grammars): the server runs it off the event loop."""
        check_tool_choice(request.tool_choice, request.tools)
        refused = [m for m in request.omitted_media if m.source is None or self.vision is None]
        if refused and self.options.request.unsupported_media == "reject":
            first = refused[0]
            raise RequestError(
                f"this model accepts text only; {first.kind} content is not supported",
                first.param,
            )
        check_sampling(request.sampling, self.vocab_size)
        prompt, thinking = self.render(request)
        tools = self._tools(request)
        max_tokens = self._fit_max_tokens(
            request.max_tokens,
            request.max_tokens_policy,
            len(prompt.token_ids),
            request.context_limit,
        )
        params = request.sampling.resolve(self.sampling_defaults, max_tokens)
        constraint, tool_choice, raw = self._custom_tools(request, tools)
        # A non-JSON constraint shapes the whole answer: no tool calls are read from it.
        parse_tools = tools and raw is None and (constraint is None or constraint.is_json)
        tool_format = self.tool_format if parse_tools else None
        try:
            processors = build_logits_processors(
                self.tokenizer,
                constraint=constraint,
                tool_choice=tool_choice,
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
            id_style=tool_format.id_style if tool_format else "openai",
        )
        if prompt.vision is not None and self.vision and self.vision.encode_ahead:
            try:  # here: off the engine
                self.vision.encode_ahead(prompt.token_ids, prompt.vision)
            except ValueError as exc:  # a family whose images this server cannot merge
                raise RequestError(str(exc), "messages") from None
        generation = GenerationRequest(
            prompt.token_ids,
            params,
            processors,
            checkpoints=history_end(self.tokenizer, prompt.token_ids, prompt.tail),
            vision=prompt.vision,
            adapter=self.adapter,
        )
        if raw is not None:
            style = self.tool_format.id_style if self.tool_format else "openai"
            return Prepared(generation, RawCallStream(output, raw.name, style))
        check = None
        if parse_tools and any(t.grammar is not None for t in request.custom_tools):
            check = functools.partial(input_mismatch, self.tokenizer, custom=request.custom_tools)
        return Prepared(generation, output, check)

    def _custom_tools(
        self, request: ChatRequest, tools: list[dict] | None
    ) -> tuple[Constraint | None, Any, CustomTool | None]:
        """(the answer's constraint, the tool_choice to enforce, the custom tool whose raw
        input is the answer) once every custom tool's grammar has compiled."""
        tool_choice = request.tool_choice if request.tools else None
        try:
            check_grammars(self.tokenizer, request.custom_tools)
        except ConstraintError as exc:
            raise RequestError(str(exc), exc.param) from None
        raw = forced_raw(tool_choice, tools, request.custom_tools)
        if raw is None:
            return request.constraint, tool_choice, None
        if request.constraint is not None:
            field = request.constraint.field
            raise RequestError(
                f"{field} cannot be combined with a forced call of a custom tool with a "
                "grammar: give one or the other",
                field,
            )
        return raw.grammar, None, raw

    def prepare_completion(
        self,
        prompt: str | list[int],
        sampling: Sampling,
        max_tokens: int | None,
        constraint: Constraint | None = None,
        *,
        max_tokens_policy: MaxTokensPolicy = "exact",
        context_limit: int | None = None,
    ) -> Prepared:
        check_prompt_size(prompt, self.options.limits)
        check_sampling(sampling, self.vocab_size)
        if isinstance(prompt, list):
            check_prompt_ids(prompt, self.vocab_size)
        token_ids = (
            list(prompt) if isinstance(prompt, list) else encode_prompt(self.tokenizer, prompt)
        )
        if not token_ids:
            raise RequestError("prompt must not be empty", "prompt")
        fitted = self._fit_max_tokens(max_tokens, max_tokens_policy, len(token_ids), context_limit)
        params = sampling.resolve(self.sampling_defaults, fitted)
        try:
            processors = build_logits_processors(
                self.tokenizer, constraint=constraint, backend=self.structured_backend
            )
        except ConstraintError as exc:
            raise RequestError(str(exc), exc.param) from None
        output = make_output_stream(reasoning_format=None, tool_format=None)
        generation = GenerationRequest(token_ids, params, processors, adapter=self.adapter)
        return Prepared(generation, output)

    @functools.cached_property
    def fim_format(self) -> FimFormat | None:
        """The model's fill-in-the-middle tokens (None: it has none)."""
        return fim_format(self.tokenizer)

    def prepare_infill(
        self,
        infill: Infill,
        sampling: Sampling,
        max_tokens: int | None,
        *,
        max_tokens_policy: MaxTokensPolicy = "exact",
        context_limit: int | None = None,
    ) -> Prepared:
        """A fill-in-the-middle completion in the model's own FIM tokens and order; a model
        without them is a 400 (``suffix``), not a prompt it was never trained on."""
        fmt = self.fim_format
        if fmt is None:
            raise RequestError(
                "this model has no fill-in-the-middle tokens in its vocabulary, so it cannot "
                "complete between a prefix and a suffix; use a code model with FIM tokens "
                "(Qwen2.5-Coder, DeepSeek-Coder, CodeLlama, StarCoder2, Codestral)",
                "suffix",
            )
        check_chars(infill.chars(), self.options.limits)
        token_ids = fim_prompt(
            self.tokenizer, fmt, infill.prefix, infill.suffix, infill.prompt, infill.extra
        )
        stops = [*sampling.stop_token_ids, *stop_ids(self.tokenizer, fmt)]
        sampling = replace(sampling, stop_token_ids=stops)
        return self.prepare_completion(
            token_ids,
            sampling,
            max_tokens,
            max_tokens_policy=max_tokens_policy,
            context_limit=context_limit,
        )

    def _fit_max_tokens(
        self,
        requested: int | None,
        policy: MaxTokensPolicy,
        prompt_len: int,
        context_limit: int | None = None,
    ) -> int:
        """The completion's token limit, under the operator's cap: when none was asked, the
        server default (or, without one, all the room the prompt leaves, as OpenAI does); the
        asked one under ``policy`` otherwise. A client's ``context_limit`` below the model's
        context bounds prompt + completion instead."""
        context = min(self.context_length, context_limit or self.context_length)
        room = context - prompt_len
        if room <= 0:
            raise ContextLengthError(prompt_len, context)
        cap = self.options.request.max_tokens_cap or room
        if requested is None:
            return min(self.options.request.max_tokens or room, room, cap)
        if policy == "cap":
            return min(requested, room, cap)
        if requested > room:
            raise ContextLengthError(prompt_len, context, requested)
        return min(requested, cap)

    # -- running ---------------------------------------------------------------------------

    def _count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def stream(self, prepared: Prepared) -> AsyncGenerator[ChatEvent, None]:
        """The request's events; admitted to the engine now, so a full queue is a
        ``QueueFullError`` (429) before a streamed response has started. Leaving early
        cancels it (and reports ``on_cancelled``)."""
        return self._events_of(prepared, self.engine.generate(prepared.generation))

    async def _events_of(
        self, prepared: Prepared, chunks: AsyncGenerator[GenerationChunk, None]
    ) -> AsyncGenerator[ChatEvent, None]:
        spent = Usage(len(prepared.generation.prompt_tokens))
        finished = False
        try:
            async with aclosing(chunks):
                async for chunk in chunks:
                    spent.completion_tokens += len(chunk.token_ids)
                    finished = chunk.finish_reason is not None
                    for event in _events(prepared, chunk, self._count_tokens):
                        if event.finish_reason is not None and prepared.check is not None:
                            await asyncio.to_thread(_check, prepared, event)  # a long input
                        yield event
        finally:
            if not finished and self.on_cancelled is not None:
                self.on_cancelled(spent)

    def stream_sync(self, prepared: Prepared) -> Iterator[ChatEvent]:
        for chunk in self.engine.generate_sync(prepared.generation):
            for event in _events(prepared, chunk, self._count_tokens):
                if event.finish_reason is not None:
                    _check(prepared, event)
                yield event

    async def complete(self, prepared: Prepared) -> ChatResult:
        return await self.result_of(prepared, self.stream(prepared))

    async def result_of(
        self, prepared: Prepared, events: AsyncGenerator[ChatEvent, None]
    ) -> ChatResult:
        """The result of ``prepared``'s stream ``events``, consumed to its end."""
        return self._result(prepared, [event async for event in events])

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


class _WithTemplate:
    """A tokenizer whose chat template is another (an adapter's own)."""

    def __init__(self, tokenizer: Tokenizer, chat_template: str):
        self._tokenizer = tokenizer
        self.chat_template = chat_template

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)


def _check(prepared: Prepared, event: ChatEvent) -> None:
    """The finished message's check (custom-tool inputs against their grammars), reported
    on the terminal event as a constraint's give-up is (docs/constrained.md)."""
    if prepared.check is None or event.constraint_gave_up is not None:
        return
    event.constraint_gave_up = prepared.check(prepared.output.message)
    if event.constraint_gave_up is not None:
        log.warning("generation %s: %s", prepared.generation.request_id, event.constraint_gave_up)


def _events(
    prepared: Prepared, chunk: GenerationChunk, count_tokens: Callable[[str], int]
) -> list[ChatEvent]:
    """The parsed deltas for one engine chunk; a final chunk also flushes the parser, and
    its flushed text travels on the terminal event with the finish reason, the usage and
    a constraint's give-up (logged here, inside the request, so the log line has its id)."""
    output = prepared.output
    delta = output.feed(chunk.text) if chunk.text else MessageDelta()
    if chunk.finish_reason is None:  # usage so far: the prompt's cached split is known now
        so_far = Usage(chunk.prompt_tokens, chunk.completion_tokens, chunk.cached_tokens)
        return [ChatEvent(delta, chunk.logprobs, usage=so_far)]
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
