"""The Python API: the same pipeline the server runs, called directly from a script."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields

from .constrained import from_response_format
from .engine.sampling_bounds import out_of_bounds
from .models.loader import CpuWeights
from .options import RuntimeOptions
from .pipeline import ChatEvent, ChatResult
from .request import ChatRequest, ImageSource, Sampling, collecting_media, media_placeholder
from .runtime import build_runtime

_SAMPLING_FIELDS = {f.name for f in fields(Sampling)} | {"max_tokens"}


@dataclass
class CompletionOutput:
    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int


class LLM:
    """``LLM()`` serves the embedded default model; ``LLM("path/or.gguf")`` another.

    Sampling keywords (``max_tokens``, ``temperature``, ``stop``, ``seed``…) are ``max_tokens``
    and the fields of ``request.Sampling``; unknown keywords are a TypeError, a value out of
    its field's range (``engine.sampling_bounds``, as every API's) a ValueError.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        cpu_weights: CpuWeights = "auto",
        reasoning_parser: str | None = None,
        tool_parser: str | None = None,
        max_tokens: int = 512,
        chat_template: str | None = None,
        chat_template_kwargs: dict | None = None,
    ):
        options = RuntimeOptions.of(
            cpu_weights=cpu_weights,
            max_tokens=max_tokens,
            reasoning_parser=reasoning_parser,
            tool_call_parser=tool_parser,
            chat_template_kwargs=dict(chat_template_kwargs or {}),
        )
        self._runtime = build_runtime(model, options, chat_template=chat_template, progress=False)
        self.name = self._runtime.loaded.name
        self.tokenizer = self._runtime.loaded.tokenizer

    def chat(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        tool_choice: str | dict | None = None,
        response_format: dict | None = None,
        **sampling,
    ) -> ChatResult:
        """Answer a conversation: ``.message`` (reasoning, content, tool calls) and ``.usage``."""
        prepared = self._prepare_chat(messages, tools, tool_choice, response_format, sampling)
        return self._runtime.pipeline.complete_sync(prepared)

    def chat_stream(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        tool_choice: str | dict | None = None,
        response_format: dict | None = None,
        **sampling,
    ) -> Iterator[ChatEvent]:
        """Yield message deltas; the last event carries ``finish_reason`` and ``usage``."""
        prepared = self._prepare_chat(messages, tools, tool_choice, response_format, sampling)
        return self._runtime.pipeline.stream_sync(prepared)

    def generate(self, prompt: str, **sampling) -> CompletionOutput:
        """Continue raw text (no chat template)."""
        text, last = "", None
        for event in self.generate_stream(prompt, **sampling):
            text += event.delta.content
            last = event
        assert last is not None and last.usage is not None
        return CompletionOutput(
            text,
            last.finish_reason or "error",
            last.usage.prompt_tokens,
            last.usage.completion_tokens,
        )

    def generate_stream(self, prompt: str, **sampling) -> Iterator[ChatEvent]:
        fields_, max_tokens = _sampling(sampling)
        prepared = self._runtime.pipeline.prepare_completion(prompt, fields_, max_tokens)
        return self._runtime.pipeline.stream_sync(prepared)

    def close(self) -> None:
        self._runtime.close()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _prepare_chat(self, messages, tools, tool_choice, response_format, sampling):
        fields_, max_tokens = _sampling(sampling)
        with collecting_media() as media:
            messages = [_with_text_content(m, i) for i, m in enumerate(messages)]
        request = ChatRequest(
            messages=messages,
            omitted_media=media,
            sampling=fields_,
            max_tokens=max_tokens,
            tools=tools,
            tool_choice=tool_choice,
            constraint=from_response_format(response_format),
        )
        return self._runtime.pipeline.prepare_chat(request)


def _with_text_content(message: dict, index: int) -> dict:
    """A message whose content is a list of OpenAI parts (``text``, ``image_url`` with a
    data URL or, when the runtime allows, a network URL) as the pipeline takes it."""
    content = message.get("content")
    if not isinstance(content, list):
        return message
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            texts.append(str(part.get("text", "")))
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            detail = image.get("detail") if isinstance(image, dict) else None
            source = ImageSource(url=url if isinstance(url, str) else None, detail=detail)
            texts.append(media_placeholder("image", f"messages.{index}.content.{j}", source))
        else:
            raise ValueError(
                f"messages[{index}].content[{j}]: parts are text or image_url, not {kind!r}"
            )
    return {**message, "content": "".join(texts)}


def _sampling(sampling: dict) -> tuple[Sampling, int | None]:
    unknown = set(sampling) - _SAMPLING_FIELDS
    if unknown:
        raise TypeError(
            f"unknown sampling argument(s): {', '.join(sorted(unknown))}; "
            f"valid: {', '.join(sorted(_SAMPLING_FIELDS))}"
        )
    for name, value in sampling.items():
        refused = out_of_bounds(name, value) if isinstance(value, int | float) else None
        if refused:
            raise ValueError(refused)
    sampling = dict(sampling)
    max_tokens = sampling.pop("max_tokens", None)
    return Sampling(**sampling), max_tokens
