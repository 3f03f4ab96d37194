"""What goes into the engine and what comes out of it, token by token."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from ..protocols import LogitsProcessor
from .sampling import SamplingParams


class GenerationError(RuntimeError):
    """A generation that failed once admitted: the model or its source raised."""


class EngineUnavailableError(GenerationError):
    """The engine can no longer generate (a sharded server's rank group failed): new
    requests are refused with it and running ones end with it."""


@dataclass(frozen=True)
class AdapterChoice:
    """The adapter a request runs under: its slot on the base model (what the batch source
    tells the model per row) and ``lane``, what the prefix cache keys its KV by (a hash of
    the adapter's files: a name reused for other weights never reads the old entries)."""

    name: str
    slot: int
    lane: str


@dataclass
class GenerationRequest:
    prompt_tokens: list[int]
    params: SamplingParams
    # Constraint processors (JSON schema, tool calls, thinking budget) run after the penalties.
    logits_processors: list[LogitsProcessor] = field(default_factory=list)
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    # Prompt offsets where a message ends: the prefix cache keeps a checkpoint there for
    # caches that cannot be trimmed (engine/boundaries.py).
    checkpoints: list[int] = field(default_factory=list)
    # The prompt's images (engine/vision.VisionInput), for a vision-language model
    vision: Any = None
    adapter: AdapterChoice | None = None  # None: the base model


@dataclass
class TopLogprob:
    token: str
    logprob: float
    bytes: list[int]


@dataclass
class TokenLogprob:
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TopLogprob] = field(default_factory=list)


@dataclass
class GenerationChunk:
    """Text decoded since the previous chunk (whole UTF-8 characters, stop strings removed).

    The last chunk of a request carries ``finish_reason``: ``stop`` (EOS, stop token or stop
    string, named in ``stop_reason``), ``length``, ``cancelled`` or ``error`` (with ``error``,
    whose type the APIs answer by: ``server/errors.FAILURES``).
    """

    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    error: GenerationError | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens served from the prefix cache
