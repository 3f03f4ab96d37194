"""Prompt lookup: drafts without a draft model.

An agent re-emits what it just read (a file it edits, the JSON a tool returned), so the
tokens that followed the latest n-gram's previous occurrence in the prompt and output are
often the next ones. ``NgramIndex`` proposes them; ``engine/lookup_verify.py`` scores them
with one forward pass for the rows that propose (beside the other rows' one-token step)
and keeps what the request's own sampler would have produced. ``Throttle`` stops a
request proposing while its proposals are rejected (ordinary chat), so lookup costs little
where it does not pay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

LookupMode = Literal["auto", "on", "off"]
LOOKUP_MODES: tuple[LookupMode, ...] = ("auto", "on", "off")


class NgramIndex:
    """A sequence's tokens and, for each n-gram size, where each n-gram last ended with a
    token after it; appending is O(sizes) per token, a lookup O(sizes)."""

    def __init__(self, min_n: int = 2, max_n: int = 4):
        self.sizes = range(max_n, min_n - 1, -1)  # longest match first
        self.tokens: list[int] = []
        self._ends: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in self.sizes}

    def extend(self, tokens: list[int]) -> None:
        for token in tokens:
            at = len(self.tokens)  # the n-grams ending just before ``token`` now have a follower
            for n in self.sizes:
                if at >= n:
                    self._ends[n][tuple(self.tokens[at - n : at])] = at
            self.tokens.append(token)

    def sync(self, tokens: list[int]) -> None:
        """Catch up with ``tokens``, of which the index holds a prefix."""
        if len(tokens) > len(self.tokens):
            self.extend(tokens[len(self.tokens) :])

    def propose(self, k: int) -> list[int]:
        """Up to ``k`` tokens that followed the longest suffix's latest earlier occurrence."""
        if k <= 0:
            return []
        length = len(self.tokens)
        for n in self.sizes:
            if length < n:
                continue
            end = self._ends[n].get(tuple(self.tokens[length - n :]))
            if end is not None:
                return self.tokens[end : end + k]
        return []


@dataclass
class Throttle:
    """Per request under ``auto``: how many tokens to propose, from what its verifies paid.

    A proposal's tokens are accepted in a chain (each only after the one before it), so
    with a per-token acceptance ``alpha`` a verify of ``k`` proposals yields
    ``1 + alpha + ... + alpha**k`` tokens, for the cost of a decode step plus
    ``cost_per_token`` of one per proposed token (a verify's rows are prompt rows; measured
    on this CPU, benchmarks/bench_prompt_lookup.py). ``alpha`` is estimated from decayed
    counts of accepted tokens and of verifies that ended in a rejection. The request
    proposes the ``k`` that pays most; when none pays ``min_gain`` it stops for ``pause``
    tokens, doubled each time in a row (up to ``max_pause``) and back to ``first_pause``
    once a verify pays again: a chat that never repeats itself pays for a few short
    verifies every ``max_pause`` tokens, and an answer that starts copying after a
    preamble is caught within ``max_pause``. Lookups that find nothing ``first_pause``
    times in a row pause it the same way (``looked_up``). ``replay``: what a verify that
    keeps part of its proposal adds, in decode steps (a hybrid model's recurrent states
    restored and the kept positions run again: one more forward), so a chain there is
    longer only when its acceptance pays for that too."""

    cost_per_token: float = 0.25  # of a decode step, per proposed token
    min_gain: float = 1.05  # tokens per decode step's cost
    decay: float = 0.7
    first_pause: int = 8
    max_pause: int = 64
    accepted: float = 2.0  # the prior: alpha 2/3
    rejections: float = 1.0
    pause: int = 0  # the next pause; 0: first_pause
    resume_at: int = 0  # the token count at which proposing starts again
    k_max: int = 1  # the most the request may propose (its last ask)
    misses: int = 0  # lookups in a row that found nothing to propose
    replay: float = 0.0  # decode steps a partly kept verify adds (0: trimmed, no forward)

    def paused(self, emitted: int) -> bool:
        """Whether a request that has ``emitted`` tokens proposes none now."""
        return emitted < self.resume_at

    def tokens(self, emitted: int, k_max: int) -> int:
        """How many tokens to propose now (0: none), at most ``k_max``."""
        if self.paused(emitted) or k_max <= 0:
            return 0
        self.k_max = k_max
        k, gain = self._best(k_max)
        return k if gain >= self.min_gain else 0

    def _best(self, k_max: int) -> tuple[int, float]:
        alpha = self.accepted / (self.accepted + self.rejections)
        best, best_gain, expected, term = 1, 0.0, 1.0, 1.0
        for k in range(1, k_max + 1):
            term *= alpha
            expected += term
            gain = expected / (1 + self.cost_per_token * k + self.replay * (1 - term))
            if gain > best_gain:
                best, best_gain = k, gain
        return best, best_gain

    def expected(self, k: int) -> float:
        """Tokens a verify of ``k`` proposals is expected to yield (``1 + alpha + ...``)."""
        alpha = self.accepted / (self.accepted + self.rejections)
        return sum(alpha**j for j in range(k + 1))

    def split_pays(self, expected: list[float], k: int, plain_rows: int) -> bool:
        """Whether verifying drafts beside ``plain_rows`` rows that decode pays the batch:
        a second forward (a decode step plus ``cost_per_token`` per position, for the
        longest draft ``k``, and ``replay`` should it be kept in part) must bring
        ``min_gain`` times the plain step's tokens per cost.
        ``expected``: what each drafting row's verify yields."""
        tokens = plain_rows + sum(expected)
        alpha = self.accepted / (self.accepted + self.rejections)
        cost = 2 + self.cost_per_token * k + self.replay * (1 - alpha**k)
        return tokens / cost >= self.min_gain * (plain_rows + len(expected))

    def looked_up(self, found: bool, emitted: int) -> None:
        """A lookup found a proposal or nothing. After ``first_pause`` misses in a row the
        request pauses as after a rejected verify, and a miss right after a pause pauses it
        again, for twice as long: a lookup reads the step's pending token, which waits for
        the forward in flight (no step is computed ahead), so ordinary chat should not pay
        that on every token."""
        if found:
            self.misses = 0
            return
        self.misses += 1
        if self.misses >= self.first_pause:
            self._pause_from(emitted)
            self.misses = self.first_pause - 1

    def _pause_from(self, emitted: int) -> None:
        pause = self.pause or self.first_pause
        self.resume_at = emitted + pause
        self.pause = min(pause * 2, self.max_pause)

    def record(self, proposed: int, accepted: int, emitted: int) -> None:
        if proposed <= 0:
            return
        self.accepted = self.decay * self.accepted + accepted
        self.rejections = self.decay * self.rejections + (accepted < proposed)
        cost = 1 + self.cost_per_token * proposed + self.replay * (accepted < proposed)
        if (1 + accepted) / cost >= self.min_gain:
            self.pause = 0  # this verify paid
        if self._best(self.k_max)[1] < self.min_gain:
            self._pause_from(emitted)
            self.accepted, self.rejections = Throttle.accepted, Throttle.rejections


@dataclass
class RowLookup:
    """One sequence's lookup state: its index (which holds its tokens) and throttle."""

    index: NgramIndex
    throttle: Throttle | None  # None: ``on`` (always propose ``k`` on a hit)

    def proposal(self, cached: list[int], pending: int, k: int) -> list[int]:
        """Proposals after ``cached`` (the tokens in the sequence's cache) and ``pending``
        (the next one to feed); ``pending`` always enters the cache next."""
        self.index.sync(cached)
        if len(self.index.tokens) == len(cached):
            self.index.extend([pending])
        if self.throttle is None:
            return self.index.propose(k)
        emitted = len(self.index.tokens)
        k = self.throttle.tokens(emitted, k)
        proposal = self.index.propose(k)
        if k > 0:
            self.throttle.looked_up(bool(proposal), emitted)
        return proposal

    def record(self, proposed: int, accepted: int) -> None:
        if self.throttle is not None:
            self.throttle.record(proposed, accepted, len(self.index.tokens))


def row_lookup(mode: LookupMode, replay: float = 0.0) -> RowLookup:
    return RowLookup(NgramIndex(), Throttle(replay=replay) if mode == "auto" else None)
