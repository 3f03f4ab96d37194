"""POST /v1/completions: raw prompts, no chat template and no parsing."""

from __future__ import annotations

import asyncio
from typing import cast

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...engine.generation import TokenLogprob
from ...pipeline import ChatEvent, Prepared
from ...request import ContextLengthError, Infill
from ..errors import APIError, parse_body
from ..ops.keepalive import OPENAI_KEEPALIVE
from ..serving import Lease, answer_with
from ..sse import sse_response
from ..streaming import generation_failed, unless_disconnected
from .choices import admitted, all_choices, check_n, seeded, streamed_choices, usage_of
from .convert import context_error
from .protocol import CompletionRequest
from .stream import error_frames, new_id, now, openai_frames, usage_body
from .structured import constraint_of


async def completions(request: Request) -> Response:
    body = await parse_body(request, CompletionRequest)
    return await answer_with(
        request,
        body.model,
        bool(body.stream),
        OPENAI_KEEPALIVE,
        lambda lease: _answer(request, body, lease),
    )


async def _answer(request: Request, body: CompletionRequest, lease: Lease) -> Response:
    check_n(body.n)
    if body.echo:
        raise APIError(400, "echo is not supported", param="echo")
    prompt = body.prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        if len(prompt) != 1:
            raise APIError(400, "one prompt per request is supported", param="prompt")
        prompt = prompt[0]
    sampling = body.sampling()
    sampling.logprobs = body.logprobs is not None
    sampling.top_logprobs = body.logprobs or 0
    text_or_ids = cast("str | list[int]", prompt)  # a list of strings was unpacked above
    constraint = constraint_of(body)
    if body.suffix and not isinstance(text_or_ids, str):
        raise APIError(400, "suffix needs a text prompt, not token ids", param="prompt")
    if body.suffix and constraint is not None:
        raise APIError(400, "suffix cannot be combined with an output constraint")

    def prepare(index: int) -> Prepared:
        """Choice ``index``'s request (``suffix``: fill-in-the-middle in the model's own
        FIM tokens)."""
        chosen = seeded(sampling, index)
        if body.suffix:
            infill = Infill(prefix=cast(str, text_or_ids), suffix=body.suffix)
            return lease.pipeline.prepare_infill(infill, chosen, body.max_tokens)
        return lease.pipeline.prepare_completion(text_or_ids, chosen, body.max_tokens, constraint)

    try:  # tokenizing a huge prompt takes seconds: off the event loop
        prepared = await asyncio.to_thread(prepare, 0)
    except ContextLengthError as exc:
        raise context_error(exc, "prompt") from None

    response_id, created, model = new_id("cmpl"), now(), lease.name

    def chunk(text: str, finish_reason: str | None, logprobs=None) -> dict:
        return {
            "id": response_id,
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [
                {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}
            ],
        }

    if body.stream:

        def event_chunk(event: ChatEvent) -> dict | None:
            if not event.delta.content and event.finish_reason is None:
                return None
            lp = completion_logprobs(event.logprobs) if sampling.logprobs else None
            return chunk(event.delta.content, event.finish_reason, lp)

        def usage_chunk(usage) -> dict:
            return {
                "id": response_id,
                "object": "text_completion",
                "created": created,
                "model": model,
                "choices": [],
                "usage": usage_body(usage),
            }

        def on_error(exc: Exception) -> list[str]:
            return error_frames(exc, lambda r: chunk("", r))

        if body.n > 1:
            pairs = await admitted(lease.pipeline, prepared, prepare, body.n)
            n_frames = streamed_choices(
                pairs, lambda index: event_chunk, usage_chunk if body.include_usage else None
            )
            return sse_response(n_frames, on_error)

        frames = openai_frames(
            lease.pipeline.stream(prepared),
            event_chunk,
            usage_chunk if body.include_usage else None,
        )
        return sse_response(frames, on_error)

    if body.n > 1:
        results = await unless_disconnected(
            request, all_choices(lease.pipeline, prepared, prepare, body.n)
        )
    else:
        results = [await unless_disconnected(request, lease.pipeline.complete(prepared))]
    if results[0].finish_reason == "error":
        raise generation_failed(results[0].error)
    choices = []
    for index, result in enumerate(results):
        lp = completion_logprobs(result.logprobs) if sampling.logprobs else None
        choice = chunk(result.message.content or "", result.finish_reason, lp)["choices"][0]
        choices.append({**choice, "index": index})
    out = chunk("", None)
    out["choices"] = choices
    out["usage"] = usage_body(usage_of([r.usage for r in results]))
    return JSONResponse(out)


def completion_logprobs(entries: list[TokenLogprob]) -> dict:
    """The legacy completions logprobs layout."""
    return {
        "tokens": [e.token for e in entries],
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [{t.token: t.logprob for t in e.top_logprobs} for e in entries],
    }
