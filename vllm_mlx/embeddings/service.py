"""The embedding and reranking service every surface calls (``/v1/embeddings``,
``/v1/rerank``, Ollama's ``/api/embed``): validation of what a request carries, batching,
and the one worker thread the forward passes run on.

A request's inputs are tokenized, checked (ids inside the vocabulary, lengths inside the
model's limit) and grouped by length into batches of at most ``BATCH_ROWS`` rows and
``BATCH_TOKENS`` padded tokens, so many short inputs cost one forward pass. Everything that
touches MLX or a tokenizer runs on ``WORKER``, never on the event loop; its own stream keeps
it apart from the engine's, so a chat stream keeps decoding meanwhile; the worker runs at
a lower priority, so where the two compete for the CPU the chat stream wins
(``benchmarks/bench_embeddings.py``).
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import mlx.core as mx
import numpy as np

from .kinds import Pooling

MAX_INPUTS = 2048  # inputs in one request (OpenAI's limit)
MAX_REQUEST_TOKENS = 300_000  # tokens in one request (OpenAI's limit)
MAX_DOCUMENTS = 1000  # documents in one rerank request (Cohere's recommended maximum)
BATCH_ROWS = 64
# rows x padded length of one forward pass. On the CPU a pass shares the cores (and the BLAS
# and kernel thread pools) with the engine's decoding, which waits behind a long one; smaller
# passes let decode steps in between. Beside 64-input requests a chat stream kept 24-35% of
# its pace (BERT) and 6-11% (the chat model pooled) with 64-row passes, 39-67% and 11-23% with
# passes of at most 512 tokens, for ~20% fewer inputs/s (benchmarks/bench_embeddings.py, two
# runs each on a shared, loaded 2-core machine: noisy).
BATCH_TOKENS = 8192 if mx.default_device() == mx.gpu else 512

# How much lower the worker runs than the engine (Linux nice levels: each thread has its
# own, and the MLX stream thread the worker starts inherits it), so that when the CPU is
# short, decoding a chat stream comes first and embeddings take what is left.
WORKER_NICE = 10


def _lower_priority() -> None:
    if sys.platform.startswith("linux"):
        try:
            os.nice(WORKER_NICE)  # the calling thread only, on Linux
        except OSError:
            pass


WORKER = ThreadPoolExecutor(
    max_workers=1, thread_name_prefix="vllm-mlx-embed", initializer=_lower_priority
)
_local = threading.local()
T = TypeVar("T")

TextInputs = Sequence[str]
TokenInputs = Sequence[Sequence[int]]


class EmbeddingError(ValueError):
    """A request the model cannot serve as asked: a 400 naming ``param``."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Embeddings:
    vectors: np.ndarray  # float32 [inputs, dimensions], unit rows
    prompt_tokens: int

    def base64(self, row: int) -> str:
        """Row ``row`` as OpenAI's base64: the little-endian float32 bytes."""
        return base64.b64encode(self.vectors[row].astype("<f4").tobytes()).decode("ascii")


@dataclass(frozen=True)
class Scores:
    scores: list[float]  # one relevance score per document, in the documents' order
    prompt_tokens: int


@dataclass(frozen=True)
class Encoded:
    """One model input: token ids and, for a pair, the segment of each (BERT's types)."""

    ids: list[int]
    types: list[int] | None = None


def on_worker(fn: Callable[[], T]) -> asyncio.Future[T]:
    """Run ``fn`` on the embedding worker thread, on that thread's own MLX stream."""

    def run() -> T:
        stream = getattr(_local, "stream", None)
        if stream is None:
            stream = _local.stream = mx.new_stream(mx.default_device())
        with mx.stream(stream):
            return fn()

    return asyncio.get_running_loop().run_in_executor(WORKER, run)


def batches(lengths: Sequence[int]) -> list[list[int]]:
    """Input indices grouped for forward passes: sorted by length (little padding), each
    group within ``BATCH_ROWS`` rows and ``BATCH_TOKENS`` padded tokens."""
    groups: list[list[int]] = []
    current: list[int] = []
    for index in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        longest = lengths[index]  # sorted: the newcomer is the longest so far
        if current and (len(current) >= BATCH_ROWS or (len(current) + 1) * longest > BATCH_TOKENS):
            groups.append(current)
            current = []
        current.append(index)
    if current:
        groups.append(current)
    return groups


def padded(rows: Sequence[Encoded], pad_id: int) -> tuple[mx.array, mx.array, mx.array]:
    """Right-padded ids, the attention mask (1 on real tokens) and the token types."""
    width = max(len(r.ids) for r in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int32)
    mask = np.zeros((len(rows), width), dtype=np.int32)
    types = np.zeros((len(rows), width), dtype=np.int32)
    for i, row in enumerate(rows):
        ids[i, : len(row.ids)] = row.ids
        mask[i, : len(row.ids)] = 1
        if row.types is not None:
            types[i, : len(row.types)] = row.types
    return mx.array(ids), mx.array(mask), mx.array(types)


def pool(hidden: mx.array, mask: mx.array, pooling: Pooling) -> mx.array:
    """One vector per row of right-padded hidden states ``[rows, length, width]``."""
    if pooling == "cls":
        return hidden[:, 0]
    if pooling == "last":
        last = mask.sum(axis=1) - 1
        return hidden[mx.arange(hidden.shape[0]), last]
    weights = mask.astype(hidden.dtype)[..., None]
    return (hidden * weights).sum(axis=1) / mx.maximum(weights.sum(axis=1), 1.0)


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def _finished(vectors: np.ndarray, rows: Sequence[Encoded], size: int | None) -> Embeddings:
    """One request's vectors cut to ``size`` dimensions, unit length, with its token count."""
    if size is not None:
        vectors = vectors[:, :size]
    return Embeddings(unit_rows(vectors), sum(len(r.ids) for r in rows))


class _Waiting:
    """Embedding requests for one model queued for the worker, with what makes their rows."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[tuple[Callable[[], Any], asyncio.Future[Embeddings]]] = []


def _settle(loop: asyncio.AbstractEventLoop, done: asyncio.Future, outcome: object) -> None:
    """Give ``done`` its result or exception from the worker (unless its request left)."""

    def settle() -> None:
        if done.done():
            return
        if isinstance(outcome, BaseException):
            done.set_exception(outcome)
        else:
            done.set_result(outcome)

    loop.call_soon_threadsafe(settle)


class _Model(ABC):
    """What an embedder and a reranker share: a tokenizer, a vocabulary, a length limit."""

    name: str
    max_length: int
    vocab_size: int
    pad_id: int = 0

    @abstractmethod
    def encode_text(self, text: str) -> list[int]:
        """``text`` as the model reads it (with its special tokens)."""

    def check_ids(self, rows: TokenInputs, param: str) -> list[Encoded]:
        """Token-id inputs, each id inside the vocabulary (an id past it would index
        outside the embedding table)."""
        checked = []
        for i, row in enumerate(rows):
            if not row:
                raise EmbeddingError(f"{param}[{i}] is empty", param)
            bad = next((t for t in row if not 0 <= t < self.vocab_size), None)
            if bad is not None:
                raise EmbeddingError(
                    f"{param}[{i}] holds token id {bad}, outside this model's vocabulary "
                    f"of {self.vocab_size}",
                    param,
                )
            checked.append(Encoded(list(row)))
        return checked

    def check_lengths(self, rows: Sequence[Encoded], param: str, truncate: bool) -> list[Encoded]:
        """Inputs within the model's limit: cut to it when ``truncate``, else a 400."""
        if truncate:
            rows = [
                Encoded(r.ids[: self.max_length], r.types and r.types[: self.max_length])
                for r in rows
            ]
        for i, row in enumerate(rows):
            if len(row.ids) > self.max_length:
                raise EmbeddingError(
                    f"{param}[{i}] is {len(row.ids)} tokens, over this model's maximum "
                    f"input length of {self.max_length} tokens",
                    param,
                )
        total = sum(len(r.ids) for r in rows)
        if total > MAX_REQUEST_TOKENS:
            raise EmbeddingError(
                f"{param} holds {total} tokens, over the {MAX_REQUEST_TOKENS} one request "
                "may carry",
                param,
            )
        return list(rows)


class Embedder(_Model):
    """A model that turns inputs into vectors."""

    dimensions: int  # the width of its vectors
    matryoshka: bool | tuple[int, ...] = False
    pooling: Pooling | None = None  # None: the model pools inside itself
    _waiting: _Waiting | None = None  # requests queued for the worker (``embed``)

    @abstractmethod
    def forward(self, rows: Sequence[Encoded]) -> mx.array:
        """Pooled vectors ``[rows, dimensions]`` for one batch (any scale)."""

    def check_dimensions(self, dimensions: int | None) -> int | None:
        if dimensions is None or dimensions == self.dimensions:
            return None
        if not self.matryoshka:
            raise EmbeddingError(
                f"model {self.name!r} does not support matryoshka representation: its "
                f"embeddings have {self.dimensions} dimensions and cannot be shortened",
                "dimensions",
            )
        if not 1 <= dimensions <= self.dimensions:
            raise EmbeddingError(
                f"dimensions must be between 1 and {self.dimensions}", "dimensions"
            )
        if isinstance(self.matryoshka, tuple) and dimensions not in self.matryoshka:
            sizes = ", ".join(str(s) for s in self.matryoshka)
            raise EmbeddingError(
                f"model {self.name!r} supports dimensions {sizes}, not {dimensions}",
                "dimensions",
            )
        return dimensions

    def embed_sync(
        self,
        texts: TextInputs | None = None,
        token_ids: TokenInputs | None = None,
        *,
        dimensions: int | None = None,
        truncate: bool = False,
        param: str = "input",
    ) -> Embeddings:
        """Unit vectors for ``texts`` or ``token_ids`` (one of them), in their order,
        ``dimensions`` long when given (the model's leading dimensions, re-normalised)."""
        rows, size = self._prepare(texts, token_ids, dimensions, truncate, param)
        return _finished(self._vectors(rows), rows, size)

    async def embed(
        self,
        texts: TextInputs | None = None,
        token_ids: TokenInputs | None = None,
        *,
        dimensions: int | None = None,
        truncate: bool = False,
        param: str = "input",
    ) -> Embeddings:
        """``embed_sync`` on the worker thread (the event loop never waits on a model).

        Requests for this model that wait for the worker together are embedded together:
        the first of their jobs to run takes them all, so concurrent single-input requests
        share forward passes; each is still validated, and fails, on its own."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Embeddings] = loop.create_future()
        if self._waiting is None:  # the event loop's thread only: no race
            self._waiting = _Waiting()
        waiting = self._waiting
        with waiting.lock:
            waiting.requests.append(
                (lambda: self._prepare(texts, token_ids, dimensions, truncate, param), done)
            )
        await on_worker(lambda: self._embed_waiting(waiting, loop))
        return await done

    def _prepare(
        self,
        texts: TextInputs | None,
        token_ids: TokenInputs | None,
        dimensions: int | None,
        truncate: bool,
        param: str,
    ) -> tuple[list[Encoded], int | None]:
        size = self.check_dimensions(dimensions)
        rows = self._inputs(texts, token_ids, param)
        return self.check_lengths(rows, param, truncate), size

    def _vectors(self, rows: Sequence[Encoded]) -> np.ndarray:
        vectors = np.zeros((len(rows), self.dimensions), dtype=np.float32)
        for group in batches([len(r.ids) for r in rows]):
            out = self.forward([rows[i] for i in group]).astype(mx.float32)
            vectors[group] = np.array(out)
        return vectors

    def _embed_waiting(self, waiting: _Waiting, loop: asyncio.AbstractEventLoop) -> None:
        """On the worker: every request waiting for this model, in shared forward passes."""
        with waiting.lock:
            taken, waiting.requests = waiting.requests, []
        prepared: list[tuple[list[Encoded], int | None, asyncio.Future[Embeddings]]] = []
        for prepare, done in taken:
            try:
                rows, size = prepare()
                prepared.append((rows, size, done))
            except Exception as exc:
                _settle(loop, done, exc)
        if not prepared:
            return
        try:
            vectors = self._vectors([row for rows, _, _ in prepared for row in rows])
        except Exception as exc:
            for _, _, done in prepared:
                _settle(loop, done, exc)
            return
        start = 0
        for rows, size, done in prepared:
            _settle(loop, done, _finished(vectors[start : start + len(rows)], rows, size))
            start += len(rows)

    def _inputs(self, texts: TextInputs | None, token_ids: TokenInputs | None, param: str):
        given = texts if texts is not None else token_ids
        if given is None or len(given) == 0:
            raise EmbeddingError(f"{param} must hold at least one input", param)
        if len(given) > MAX_INPUTS:
            raise EmbeddingError(
                f"{param} holds {len(given)} inputs, over the {MAX_INPUTS} one request may carry",
                param,
            )
        if token_ids is not None:
            return self.check_ids(token_ids, param)
        assert texts is not None
        for i, text in enumerate(texts):
            if not text:
                raise EmbeddingError(f"{param}[{i}] is an empty string", param)
        return [Encoded(self.encode_text(t)) for t in texts]


class Reranker(_Model):
    """A model that scores documents against a query."""

    @abstractmethod
    def encode_pair(self, query: str, document: str) -> Encoded:
        """The query and one document as one model input."""

    @abstractmethod
    def score_batch(self, rows: Sequence[Encoded]) -> mx.array:
        """One relevance score in [0, 1] per row."""

    def score_sync(self, query: str, documents: Sequence[str]) -> Scores:
        if not query:
            raise EmbeddingError("query is an empty string", "query")
        if not documents:
            raise EmbeddingError("documents must hold at least one document", "documents")
        if len(documents) > MAX_DOCUMENTS:
            raise EmbeddingError(
                f"documents holds {len(documents)} documents, over the {MAX_DOCUMENTS} one "
                "request may carry",
                "documents",
            )
        rows = [self.encode_pair(query, d) for d in documents]
        rows = self.check_lengths(rows, "documents", truncate=False)
        scores = np.zeros(len(rows), dtype=np.float32)
        for group in batches([len(r.ids) for r in rows]):
            scores[group] = np.array(self.score_batch([rows[i] for i in group]).astype(mx.float32))
        return Scores([float(s) for s in scores], sum(len(r.ids) for r in rows))

    async def score(self, query: str, documents: Sequence[str]) -> Scores:
        return await on_worker(lambda: self.score_sync(query, documents))


def hidden_width(model: Any) -> int:
    """The width of a model's hidden states, from its config."""
    args = getattr(model, "args", None) or getattr(model, "config", None)
    width = getattr(args, "hidden_size", None)
    if not isinstance(width, int):
        raise EmbeddingError("the model does not say its hidden size")
    return width
