"""The engine: one worker thread runs every request through a continuously batched source.

Requests wait in a queue; up to ``max_num_seqs`` run at once, joining and leaving the batch
between steps, each with its own sampler, logits processors and stop conditions. Clients
consume chunks from asyncio or from plain threads; closing the consumer cancels the request,
and the worker drops it from the batch before the next step.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import weakref
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass

from ..protocols import DecodingTokenizer
from .decoder import RequestDecoder
from .generation import EngineUnavailableError, GenerationChunk, GenerationError, GenerationRequest
from .sampling import make_penalty_processors, make_sampler
from .sources import ModelBatchSource, TokenSource
from .threads import release_mlx_streams

log = logging.getLogger(__name__)

Emit = Callable[[GenerationChunk], object]
_SHUTDOWN = object()


class QueueFullError(RuntimeError):
    """More requests are waiting than the server accepts."""


class _Job:
    def __init__(self, request: GenerationRequest, emit: Emit):
        self.request = request
        self.emit = emit
        self.cancelled = threading.Event()


@dataclass
class _Running:
    job: _Job
    decoder: RequestDecoder


async def _chunks(
    chunks: asyncio.Queue[GenerationChunk], job: _Job
) -> AsyncGenerator[GenerationChunk, None]:
    try:
        while True:
            chunk = await chunks.get()
            yield chunk
            if chunk.finish_reason is not None:
                return
    finally:
        job.cancelled.set()


class Engine:
    def __init__(
        self,
        source: TokenSource,
        tokenizer: DecodingTokenizer,
        *,
        max_num_seqs: int = 8,
        max_queue: int = 256,
    ):
        self.source = source
        self.tokenizer = tokenizer
        self.max_num_seqs = max_num_seqs
        self.max_queue = max_queue
        self._jobs: queue.Queue = queue.Queue()
        self._eos = set(tokenizer.eos_token_ids)
        self._running: dict[int, _Running] = {}
        self._deferred: list[_Job] = []  # waiting for a shared prefix's prefill (_admit)
        self._closing = threading.Event()
        self.unavailable: str | None = None  # why the engine stopped serving (``halt``)
        if isinstance(source, ModelBatchSource):  # a long prefill yields to a newcomer
            source.yield_to(self._admissible)
        self._thread = threading.Thread(target=self._work, name="vllm-mlx-engine", daemon=True)
        self._thread.start()

    # -- consuming -------------------------------------------------------------------------

    def generate(self, request: GenerationRequest) -> AsyncGenerator[GenerationChunk, None]:
        """Admit ``request`` now (``QueueFullError`` before any response has started) and
        return its chunks; leaving the loop early, or dropping the iterator unstarted,
        cancels it."""
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[GenerationChunk] = asyncio.Queue()
        job = self._submit(request, lambda c: loop.call_soon_threadsafe(chunks.put_nowait, c))
        stream = _chunks(chunks, job)
        weakref.finalize(stream, job.cancelled.set)
        return stream

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

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def spec_counts(self) -> tuple[int, int]:
        """Speculative decoding so far: (draft tokens proposed, accepted)."""
        return self.source.spec_counts

    def close(self) -> None:
        """Stop: running and waiting requests end as cancelled, then the worker exits."""
        self._closing.set()
        self._jobs.put(_SHUTDOWN)
        self._thread.join(timeout=10)
        self.flush()

    def flush(self) -> None:
        """Finish the source's pending writes (the prefix cache on disk)."""
        self.source.flush()

    def halt(self, reason: str) -> None:
        """Stop serving for good, from any thread (the engine's may be stuck in a collective
        that never returns): new requests raise ``EngineUnavailableError``, running and
        waiting ones end now with an error that says why."""
        self.unavailable = reason
        for running in list(self._running.values()):
            running.job.emit(running.decoder.on_end("error", error=self._failure(reason)))
        for job in list(self._deferred):
            job.emit(GenerationChunk(finish_reason="error", error=self._failure(reason)))

    def _failure(self, message: str) -> GenerationError:
        """What ends a request that failed: after ``halt``, the engine's unavailability."""
        if self.unavailable:
            return EngineUnavailableError(self.unavailable)
        return GenerationError(message)

    def _submit(self, request: GenerationRequest, emit: Emit) -> _Job:
        if self.unavailable:
            raise EngineUnavailableError(self.unavailable)
        if self._jobs.qsize() >= self.max_queue:
            raise QueueFullError(f"{self._jobs.qsize()} requests are already waiting")
        job = _Job(request, emit)
        self._jobs.put(job)
        return job

    # -- the worker ------------------------------------------------------------------------

    def _work(self) -> None:
        try:
            self._serve()
        finally:
            release_mlx_streams()  # else a process exiting right after close() may abort

    def _serve(self) -> None:
        while self._admit():
            self._drop_cancelled()
            if not self._running:
                continue
            try:
                steps, ended = self.source.step()
            except Exception as exc:  # a failed step fails its batch, not the server
                log.exception("generation step failed")
                self._fail_all(str(exc))
                continue
            for step in steps:
                running = self._running.get(step.uid)
                if running is None:
                    continue
                chunk = running.decoder.on_token(step.token, step.logprobs, step.at_limit)
                if chunk.finish_reason is not None:
                    del self._running[step.uid]
                    if not step.at_limit:
                        self.source.remove(step.uid)
                running.job.emit(chunk)
            for uid in ended:
                running = self._running.pop(uid, None)
                if running is not None:
                    running.job.emit(running.decoder.on_end("stop"))

    def _admit(self) -> bool:
        """Move waiting jobs into the batch; block while idle. False on shutdown.

        A job whose prompt shares a long prefix with one still prefilling is deferred until
        that prefill ends and lands in the prefix cache, instead of computing it twice."""
        for job in list(self._deferred):
            if len(self._running) >= self.max_num_seqs:
                break
            if job.cancelled.is_set() or not self.source.prefill_to_share(
                job.request.prompt_tokens
            ):
                self._deferred.remove(job)
                if not job.cancelled.is_set():
                    self._start(job)
        while len(self._running) < self.max_num_seqs:
            try:
                job = self._jobs.get(block=not self._running)
            except queue.Empty:
                return True
            if job is _SHUTDOWN:
                for running in self._running.values():
                    running.job.emit(running.decoder.on_end("cancelled"))
                for waiting in self._deferred:
                    waiting.emit(GenerationChunk(finish_reason="cancelled"))
                return False
            if self._closing.is_set():
                job.emit(GenerationChunk(finish_reason="cancelled"))
            elif job.cancelled.is_set():
                continue
            elif job.request.adapter is None and self.source.prefill_to_share(
                job.request.prompt_tokens
            ):  # only the base lane's prefills are shared
                self._deferred.append(job)
            else:
                self._start(job)
        return True

    def _start(self, job: _Job) -> None:
        request, params = job.request, job.request.params
        try:
            uid, cached = self.source.insert(
                request.prompt_tokens,
                sampler=make_sampler(params),
                processors=make_penalty_processors(params) + list(request.logits_processors),
                max_tokens=params.max_tokens,
                checkpoints=request.checkpoints,
                **({"vision": request.vision} if request.vision is not None else {}),
                **({"adapter": request.adapter} if request.adapter is not None else {}),
            )
        except Exception as exc:
            log.exception("could not start request %s", request.request_id)
            job.emit(GenerationChunk(finish_reason="error", error=self._failure(str(exc))))
            return
        decoder = RequestDecoder(request, self.tokenizer, self._eos, cached_tokens=cached)
        self._running[uid] = _Running(job, decoder)

    def _admissible(self) -> bool:
        """Whether a request waits that the next admission would start (engine thread)."""
        return not self._jobs.empty() and len(self._running) < self.max_num_seqs

    def _drop_cancelled(self) -> None:
        for uid, running in list(self._running.items()):
            if running.job.cancelled.is_set() or self._closing.is_set():
                del self._running[uid]
                self.source.remove(uid)
                running.job.emit(running.decoder.on_end("cancelled"))

    def _fail_all(self, message: str) -> None:
        self.source.reset()
        for running in self._running.values():
            running.job.emit(running.decoder.on_end("error", error=self._failure(message)))
        self._running.clear()
