"""Per-request decoding: token ids in, text chunks out.

Whole UTF-8 characters only (mlx-lm's streaming detokenizer), stop strings held back and
never emitted, stop tokens ending the request, usage and logprobs counted as they go.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from ..protocols import DecodingTokenizer
from .generation import (
    GenerationChunk,
    GenerationError,
    GenerationRequest,
    TokenLogprob,
    TopLogprob,
)
from .stops import StopMatcher


class RequestDecoder:
    def __init__(
        self,
        request: GenerationRequest,
        tokenizer: DecodingTokenizer,
        eos_ids: set[int],
        cached_tokens: int = 0,
    ):
        self.params = request.params
        self.tokenizer = tokenizer
        self.detok = tokenizer.detokenizer
        self.stops = StopMatcher(self.params.stop)
        self.stop_ids = eos_ids | set(self.params.stop_token_ids)
        self.prompt_tokens = len(request.prompt_tokens)
        self.completion_tokens = 0
        self.cached_tokens = cached_tokens

    def on_token(self, token: int, logprobs: mx.array | None, at_limit: bool) -> GenerationChunk:
        """Decode one generated token; ``at_limit``: it is the last one max_tokens allows."""
        self.completion_tokens += 1
        lp = (
            [self._logprob(token, logprobs)]
            if self.params.logprobs and logprobs is not None
            else []
        )
        if token in self.stop_ids:
            self.detok.finalize()
            tail, hit = self.stops.feed(self.detok.last_segment)
            tail += "" if hit else self.stops.flush()
            return self._finish(tail, "stop", hit or token, logprobs=lp)
        self.detok.add_token(token)
        text, hit = self.stops.feed(self.detok.last_segment)
        if hit is not None:
            return self._finish(text, "stop", hit, token_ids=[token], logprobs=lp)
        if at_limit:
            self.detok.finalize()
            tail, hit = self.stops.feed(self.detok.last_segment)
            if hit is not None:
                return self._finish(text + tail, "stop", hit, token_ids=[token], logprobs=lp)
            return self._finish(
                text + tail + self.stops.flush(), "length", None, token_ids=[token], logprobs=lp
            )
        return self._chunk(text=text, token_ids=[token], logprobs=lp)

    def on_end(self, reason: str, error: GenerationError | None = None) -> GenerationChunk:
        """End without a deciding token: the source ran out (``stop``), ``cancelled``,
        or ``error``."""
        tail = ""
        if reason == "stop":
            self.detok.finalize()
            tail, hit = self.stops.feed(self.detok.last_segment)
            if hit is not None:
                return self._finish(tail, "stop", hit)
            tail += self.stops.flush()
        return self._finish(tail, reason, None, error=error)

    def _finish(self, text: str, reason: str, stop_reason, **extra: Any) -> GenerationChunk:
        return self._chunk(text=text, finish_reason=reason, stop_reason=stop_reason, **extra)

    def _chunk(self, **fields: Any) -> GenerationChunk:
        """A chunk carrying the usage so far."""
        return GenerationChunk(
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cached_tokens=self.cached_tokens,
            **fields,
        )

    def _logprob(self, token: int, logprobs: mx.array) -> TokenLogprob:
        logprobs = logprobs.astype(mx.float32)
        value: float = logprobs[token].item()  # type: ignore[assignment]
        entry = self._entry(token, value)
        top = self.params.top_logprobs
        if top > 0:
            ids = mx.argpartition(-logprobs, kth=top - 1)[:top]
            top_ids: list[int] = ids.tolist()  # type: ignore[assignment]
            values: list[float] = logprobs[ids].tolist()  # type: ignore[assignment]
            pairs = sorted(zip(top_ids, values, strict=True), key=lambda p: -p[1])
            entry.top_logprobs = [
                TopLogprob(e.token, e.logprob, e.bytes)
                for e in (self._entry(i, v) for i, v in pairs)
            ]
        return entry

    def _entry(self, token: int, logprob: float) -> TokenLogprob:
        text = self.tokenizer.decode([token])
        return TokenLogprob(token=text, logprob=logprob, bytes=list(text.encode()))
