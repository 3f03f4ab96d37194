"""The engine: one worker thread turns requests into streams of text chunks.

Requests queue and run one at a time (continuous batching is a later step behind the same
interface). Clients consume chunks from asyncio or from plain threads; closing the consumer
cancels the request, and the worker notices before its next token.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import mlx.core as mx

from .sampling import make_penalty_processors, make_sampler
from .sources import TokenSource
from .stops import StopMatcher
from .types import GenerationChunk, GenerationRequest, TokenLogprob, TopLogprob

log = logging.getLogger(__name__)

Emit = Callable[[GenerationChunk], None]
_SHUTDOWN = object()


class QueueFullError(RuntimeError):
    """More requests are waiting than the server accepts."""


class _Job:
    def __init__(self, request: GenerationRequest, emit: Emit):
        self.request = request
        self.emit = emit
        self.cancelled = threading.Event()


class Engine:
    def __init__(self, source: TokenSource, tokenizer: Any, *, max_queue: int = 256):
        self.source = source
        self.tokenizer = tokenizer
        self.max_queue = max_queue
        self._jobs: queue.Queue = queue.Queue()
        self._eos = set(tokenizer.eos_token_ids)
        self.running: str | None = None  # id of the request generating now, for /health
        self._thread = threading.Thread(target=self._work, name="vllm-mlx-engine", daemon=True)
        self._thread.start()

    # -- consuming -------------------------------------------------------------------------

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]:
        """Stream chunks; leaving the loop early (or a client disconnect) cancels the request."""
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[GenerationChunk] = asyncio.Queue()
        job = self._submit(request, lambda c: loop.call_soon_threadsafe(chunks.put_nowait, c))
        try:
            while True:
                chunk = await chunks.get()
                yield chunk
                if chunk.finish_reason is not None:
                    return
        finally:
            job.cancelled.set()

    def generate_sync(self, request: GenerationRequest) -> Iterator[GenerationChunk]:
        chunks: queue.Queue[GenerationChunk] = queue.Queue()
        job = self._submit(request, chunks.put)
        try:
            while True:
                chunk = chunks.get()
                yield chunk
                if chunk.finish_reason is not None:
                    return
        finally:
            job.cancelled.set()

    @property
    def queue_depth(self) -> int:
        return self._jobs.qsize()

    def close(self) -> None:
        self._jobs.put(_SHUTDOWN)
        self._thread.join(timeout=5)

    def _submit(self, request: GenerationRequest, emit: Emit) -> _Job:
        if self._jobs.qsize() >= self.max_queue:
            raise QueueFullError(f"{self._jobs.qsize()} requests are already waiting")
        job = _Job(request, emit)
        self._jobs.put(job)
        return job

    # -- the worker ------------------------------------------------------------------------

    def _work(self) -> None:
        while (job := self._jobs.get()) is not _SHUTDOWN:
            if job.cancelled.is_set():
                continue
            self.running = job.request.request_id
            try:
                self._run(job)
            except Exception as exc:  # the worker must survive any one request
                log.exception("generation failed for request %s", job.request.request_id)
                job.emit(GenerationChunk(finish_reason="error", error=str(exc)))
            finally:
                self.running = None

    def _run(self, job: _Job) -> None:
        req, params = job.request, job.request.params
        detok = self.tokenizer.detokenizer
        detok.reset()
        stops = StopMatcher(params.stop)
        stop_ids = self._eos | set(params.stop_token_ids)
        processors = make_penalty_processors(params) + list(req.logits_processors)
        usage = {"prompt_tokens": len(req.prompt_tokens), "completion_tokens": 0}

        def finish(text: str, reason: str, stop_reason=None, **extra) -> None:
            job.emit(
                GenerationChunk(
                    text=text, finish_reason=reason, stop_reason=stop_reason, **usage, **extra
                )
            )

        tokens = self.source.generate(
            req.prompt_tokens,
            sampler=make_sampler(params),
            logits_processors=processors,
            max_tokens=params.max_tokens,
        )
        for token, logprobs in tokens:
            if job.cancelled.is_set():
                return finish("", "cancelled")
            usage["completion_tokens"] += 1
            lp = self._logprob(token, logprobs, params.top_logprobs) if params.logprobs else None
            if token in stop_ids:
                detok.finalize()
                tail, hit = stops.feed(detok.last_segment)
                return finish(
                    tail + ("" if hit else stops.flush()),
                    "stop",
                    hit or token,
                    logprobs=[lp] if lp else [],
                )
            detok.add_token(token)
            text, hit = stops.feed(detok.last_segment)
            if hit is not None:
                return finish(text, "stop", hit, token_ids=[token], logprobs=[lp] if lp else [])
            job.emit(
                GenerationChunk(text=text, token_ids=[token], logprobs=[lp] if lp else [], **usage)
            )
        detok.finalize()
        tail, hit = stops.feed(detok.last_segment)
        if hit is not None:
            return finish(tail, "stop", hit)
        ran_out = usage["completion_tokens"] >= params.max_tokens
        finish(tail + stops.flush(), "length" if ran_out else "stop")

    def _logprob(self, token: int, logprobs: mx.array | None, top: int) -> TokenLogprob | None:
        if logprobs is None:
            return None
        logprobs = logprobs.astype(mx.float32)
        entry = self._token_entry(token, logprobs[token].item())
        if top > 0:
            ids = mx.argpartition(-logprobs, kth=top - 1)[:top]
            values = logprobs[ids].tolist()
            best = sorted(zip(ids.tolist(), values, strict=True), key=lambda p: -p[1])
            entry.top_logprobs = [
                TopLogprob(e.token, e.logprob, e.bytes)
                for e in (self._token_entry(i, v) for i, v in best)
            ]
        return entry

    def _token_entry(self, token: int, logprob: float) -> TokenLogprob:
        text = self.tokenizer.decode([token])
        return TokenLogprob(token=text, logprob=logprob, bytes=list(text.encode()))
