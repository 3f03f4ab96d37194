"""Reasoning-aware wrapper: free thinking (with an optional budget), then constrained content.

Phases: IDLE (nothing generated that decides yet) → THINKING (inside the family's reasoning
block) → TRANSITIONING (budget spent: the end sequence is forced token by token) → CONTENT
(delegated to the inner constraint, reasoning control tokens masked). The start and end
sequences come from the reasoning format, and the starting phase from the rendered prompt tail.
A model that never opens a reasoning block is never forced into one.

State is a pure function of the generated ids: one small immutable state is kept per position,
so a rollback of the token history (speculative decoding) restores the exact earlier state.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

import mlx.core as mx

from .content_constraint import ContentConstraint, common_prefix_length
from .masks import apply_allowed_mask, apply_packed, ban_bias, only
from .processor import generated_ids

logger = logging.getLogger(__name__)


class Phase(enum.Enum):
    IDLE = "idle"
    THINKING = "thinking"
    TRANSITIONING = "transitioning"
    CONTENT = "content"


@dataclass(frozen=True)
class ThinkingState:
    """Where the request is after some generated ids (one instance per position)."""

    phase: Phase
    matched: int = 0  # ids of the start (IDLE) or end (THINKING/TRANSITIONING) sequence seen
    thought: int = 0  # ids generated inside the reasoning block so far
    content_start: int = 0  # generated position where content begins (CONTENT only)


def initial_phase(prompt_tail: str, start: str, end: str) -> Phase:
    """The phase implied by the end of the rendered prompt.

    A tail that opened a reasoning block and did not close it (``...<think>\\n``) starts in
    THINKING; one that already closed it (thinking switched off, ``<think>\\n\\n</think>``)
    starts in CONTENT; anything else starts IDLE.
    """
    opened = prompt_tail.rfind(start)
    closed = prompt_tail.rfind(end)
    if opened >= 0 and closed < opened + len(start):
        return Phase.THINKING
    if closed >= 0:
        return Phase.CONTENT
    return Phase.IDLE


class ThinkingAwareLogitsProcessor:
    """``processor(tokens, logits) -> logits`` with reasoning phases around a content constraint."""

    def __init__(
        self,
        start_ids: Sequence[int],
        end_ids: Sequence[int],
        *,
        inner: ContentConstraint | None = None,
        start_phase: Phase = Phase.IDLE,
        budget: int | None = None,
        eos_ids: Sequence[int] = (),
    ) -> None:
        if not start_ids or not end_ids:
            raise ValueError("reasoning start and end sequences must be non-empty")
        self.start_ids = tuple(start_ids)
        self.end_ids = tuple(end_ids)
        self.inner = inner
        self.budget = budget
        self.eos_ids = tuple(eos_ids)
        # Single-token delimiters can be masked in content; multi-token ones are ordinary text.
        self.control_ids = tuple(seq[0] for seq in (self.start_ids, self.end_ids) if len(seq) == 1)
        self._reason: str | None = None
        self._bans: dict[tuple, mx.array] = {}  # cached ban biases: built once per request
        self._prompt_length: int | None = None
        self._seen: list[int] = []
        self._states: list[ThinkingState] = [self._settle(ThinkingState(start_phase))]

    # -- reporting -----------------------------------------------------------------------
    @property
    def gave_up(self) -> str | None:
        """Why constraining stopped for this request (this wrapper or the inner constraint)."""
        return self._reason or (self.inner.gave_up if self.inner else None)

    @property
    def state(self) -> ThinkingState:
        """The state for the next token."""
        return self._states[-1]

    def _give_up(self, reason: str) -> None:
        if self._reason is None:
            self._reason = reason
            logger.warning("thinking processor gave up: %s", reason)

    # -- transitions ---------------------------------------------------------------------
    def _settle(self, state: ThinkingState) -> ThinkingState:
        """Enter TRANSITIONING once the budget is spent."""
        if (
            state.phase is Phase.THINKING
            and self.budget is not None
            and state.thought >= self.budget
        ):
            return replace(state, phase=Phase.TRANSITIONING)
        return state

    def _step(self, state: ThinkingState, token: int, position: int) -> ThinkingState:
        """The state after ``token`` was generated at ``position``."""
        if state.phase is Phase.IDLE:
            if token == self.start_ids[state.matched]:
                if state.matched + 1 == len(self.start_ids):
                    return self._settle(ThinkingState(Phase.THINKING))
                return replace(state, matched=state.matched + 1)
            return ThinkingState(Phase.CONTENT, content_start=position - state.matched)
        if state.phase in (Phase.THINKING, Phase.TRANSITIONING):
            if token == self.end_ids[state.matched]:
                matched = state.matched + 1
                if matched == len(self.end_ids):
                    return ThinkingState(Phase.CONTENT, content_start=position + 1)
            elif state.phase is Phase.TRANSITIONING:
                self._give_up(
                    f"forced end-of-reasoning id {self.end_ids[state.matched]} "
                    f"was replaced by {token} at position {position}"
                )
                return state
            else:
                matched = 1 if token == self.end_ids[0] else 0
            return self._settle(replace(state, matched=matched, thought=state.thought + 1))
        return state

    def _sync(self, generated: list[int]) -> None:
        keep = common_prefix_length(self._seen, generated)
        del self._seen[keep:]
        del self._states[keep + 1 :]
        for position in range(keep, len(generated)):
            token = generated[position]
            self._states.append(self._step(self._states[-1], token, position))
            self._seen.append(token)

    # -- masking -------------------------------------------------------------------------
    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        if self._prompt_length is None:
            self._prompt_length = tokens.size
        if self._reason is not None:
            return logits
        generated = generated_ids(tokens, self._prompt_length)
        self._sync(generated)
        if self._reason is not None:
            return logits
        state = self.state
        vocab = logits.shape[-1]
        if state.phase is Phase.TRANSITIONING:
            return apply_packed(logits, only(self.end_ids[state.matched], vocab))
        if state.phase is Phase.THINKING:
            if self.inner is None or not self.eos_ids:
                return logits
            return logits + self._ban(self.eos_ids, vocab, logits.dtype)
        if state.phase is Phase.IDLE:
            if state.matched:
                return apply_packed(logits, only(self.start_ids[state.matched], vocab))
            if self.inner is None:
                return logits
            allowed = self.inner.allowed_mask([])
            if allowed is None:
                return logits
            allowed = allowed.copy()
            allowed[self.start_ids[0]] = True
            return apply_allowed_mask(logits, allowed)
        content = generated[state.content_start :]
        if self.inner is not None:
            logits = self.inner.apply(content, logits)
            if self.inner.gave_up is not None:
                return logits
        if not self.control_ids:
            return logits
        return logits + self._ban(self.control_ids, vocab, logits.dtype)

    def _ban(self, ids: Sequence[int], vocab: int, dtype: mx.Dtype) -> mx.array:
        key = (tuple(ids), vocab, dtype)
        if key not in self._bans:
            self._bans[key] = ban_bias(ids, vocab, dtype)
        return self._bans[key]
