"""Drafts (prompt lookup's, or any drafter's) verified inside mlx-lm's continuous batch.

mlx-lm's ``GenerationBatch`` keeps, between steps, every sequence's cache (the tokens it
has emitted) and a pending token sampled but not yet fed. A verify step feeds each row its
pending token followed by its draft (rows with fewer are padded; their padding is causal,
so it changes nothing before it) as one ``[B, 1 + k]`` forward pass, then decides each
row's positions in order with the row's own logits processors and sampler
(``speculative.resample``): greedy keeps a draft token while it is the argmax, a seeded
request draws each position with its own next key as plain decoding would (the same
tokens), an unseeded one accepts a draft token ``d`` with probability ``p(d)`` and
otherwise draws from ``p`` without ``d`` (exactly ``p``). On the native kernels a row of a
block has the one-row decode step's bits (``tests/native/test_row_invariance.py``), so the
verified logits are the ones plain decoding computes.

A batch's rows share one cache end, so every row of a verify keeps as many new positions
as the row that kept fewest (its pending token and accepted drafts, or its correction),
and the cache is trimmed once for all rows, with no per-row shift. A recurrent layer's
state (an ``ArraysCache``: LFM2's convolutions, Qwen3-Next's Gated DeltaNet) has no
history per position to trim: it is kept before the verify (references, no copy) and,
when the verify keeps fewer positions than it fed, restored, the other layers trimmed
back, and the kept tokens run again (one more forward of those positions for the batch, a
cost a hybrid model's ``Throttle`` counts: its ``replay``, so a chain there must pay for
the second forward too).
A row's decisions past
that point are taken back (its processors' context shortened, a seeded sampler's key
restored) and decided again next step: they were exact draws, and where the cut falls
depends only on decisions already made, so the tokens keep their distribution (and a seed
its tokens). In a mixed batch (some rows draft, others do not) the drafting rows move into
the generator's second batch (``FairBatchGenerator.drafting_batch``, a copy of their
caches, once), which verifies while the first takes its ordinary one-token step: two
forward passes a step, each batch aligned at its own cache end. A row that stops drafting
goes back after ``LINGER`` steps without a draft (meanwhile its batch takes plain steps),
or at once when a neighbour in that batch drafts. The second forward costs about a decode
step of its own, so under ``auto`` the split runs only when the drafting rows' expected
tokens pay for it across the batch (``Throttle.split_pays``): with several plain rows
beside one drafting row it seldom does, and every row then decodes in the one batch. The
sequences carry no stop sequences (the engine decides stops), so only ``max_tokens`` ends
one here; drafts stop one short of it.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import mlx.core as mx
from mlx_lm.models.cache import ArraysCache, BatchKVCache

from .lookup import LookupMode, RowLookup, Throttle, row_lookup
from .sampling import RequestSampler
from .speculative import resample

# The module (the package exports a function of that name): its token loop's ``mx``, whose
# logsumexp a platform may route (the native kernel on the CPU path); normalizing with it
# gives the verified log-probabilities plain decoding's bits.
_token_loop = importlib.import_module("mlx_lm.generate")

# Steps a row of the drafting batch may go without a draft before it rejoins the others
# (a miss or two inside a copied file should not cost two cache copies).
LINGER = 4


class Drafter(Protocol):
    """Per-row draft tokens for the verify step, keyed by generator uid."""

    def observe(self, batches: Sequence[Any]) -> None:
        """The decoding batches before a step, after the last one's forward passes (a
        drafter reading the model's states takes that step's here)."""

    def propose(self, uid: int, cached: list[int], pending: int, k: int) -> list[int]:
        """Up to ``k`` tokens to follow ``pending`` (the row's next input, not yet in its
        cache), given ``cached`` (the tokens in its cache)."""

    def may_propose(self, uid: int, cached: int) -> bool:
        """Whether the row, with ``cached`` tokens in its cache, may propose at its next
        step (False: it will not, whatever its pending token). Asked before the pending
        tokens are read: a step in which no row proposes then need not wait for them."""

    def record(self, uid: int, proposed: int, accepted: int) -> None:
        """What a verify kept of the row's draft."""

    def split_pays(self, drafts: dict[int, list[int]], plain_rows: int) -> bool:
        """Whether verifying ``drafts`` (by uid) in a forward of their own, beside
        ``plain_rows`` rows taking a one-token step, is worth its cost to the batch."""

    def forget(self, uid: int) -> None: ...

    def reset(self) -> None: ...


def verifiable(cache: Any) -> bool:
    """Whether a batch's layer cache can be taken back after a verify: trimmed (plain
    batched KV), or restored and replayed (a recurrent layer's ``ArraysCache``)."""
    return type(cache) is BatchKVCache or isinstance(cache, ArraysCache)


class Throttled(Protocol):
    throttle: Throttle | None  # None: ``on`` (always propose)


RowT = TypeVar("RowT", bound=Throttled)


class ThrottledRows(Generic[RowT]):
    """A drafter's per-row states (by uid), each with its ``Throttle`` under ``auto``."""

    def __init__(self) -> None:
        self.rows: dict[int, RowT] = {}

    def split_pays(self, drafts: dict[int, list[int]], plain_rows: int) -> bool:
        """``on``: always; ``auto``: by the rows' throttles (their acceptance so far)."""
        throttles = [(self.rows[uid].throttle, len(d)) for uid, d in drafts.items()]
        if not throttles or any(t is None for t, _ in throttles):
            return True
        k = max(n for _, n in throttles)
        expected = [t.expected(n) for t, n in throttles if t is not None]
        first = throttles[0][0]
        assert first is not None
        return first.split_pays(expected, k, plain_rows)

    def forget(self, uid: int) -> None:
        self.rows.pop(uid, None)

    def reset(self) -> None:
        self.rows.clear()


class NgramDrafter(ThrottledRows[RowLookup]):
    """Prompt lookup's drafts: each row's n-gram index, throttled under ``auto``
    (``replay``: ``Throttle.replay``)."""

    def __init__(self, mode: LookupMode, replay: float = 0.0):
        super().__init__()
        self.mode, self.replay = mode, replay

    def observe(self, batches: Sequence[Any]) -> None:
        """Nothing: the index reads the tokens ``propose`` is given."""

    def propose(self, uid: int, cached: list[int], pending: int, k: int) -> list[int]:
        row = self.rows.get(uid)
        if row is None:
            row = self.rows[uid] = row_lookup(self.mode, self.replay)
        return row.proposal(cached, pending, k)

    def may_propose(self, uid: int, cached: int) -> bool:
        row = self.rows.get(uid)
        return row is None or row.throttle is None or not row.throttle.paused(cached + 1)

    def record(self, uid: int, proposed: int, accepted: int) -> None:
        row = self.rows.get(uid)
        if row is not None:
            row.record(proposed, accepted)


@dataclass
class Decided:
    token: int
    logprobs: mx.array
    key: mx.array | None  # the sampler's key before this decision (a seeded request's)


def move_rows(gen: Any, rows: list[int], to_drafting: bool) -> None:
    """Move ``rows`` of one of ``gen``'s generation batches into the other (their caches
    copied; every row of a batch into an empty one: the batches swap, nothing copied)."""
    source, target = (
        (gen._generation_batch, gen.drafting_batch)
        if to_drafting
        else (gen.drafting_batch, gen._generation_batch)
    )
    if not rows:
        return
    if len(rows) == len(source) and not len(target):
        gen._generation_batch, gen.drafting_batch = gen.drafting_batch, gen._generation_batch
        return
    part = copy.copy(source)  # filter() rebinds the lists and arrays it keeps
    part.prompt_cache = [copy.copy(c) for c in source.prompt_cache]
    part.filter(rows)
    part._current_tokens, part._current_logprobs = None, []  # the last step's, unused
    source.filter([i for i in range(len(source)) if i not in set(rows)])
    target.extend(part)


class LookupDecoder:
    """Draft verification for a ``FairBatchGenerator``'s generation batches; generator uids
    key the per-sequence state. ``drafter``: where drafts come from (prompt lookup's n-gram
    index by default)."""

    def __init__(self, mode: LookupMode, num_tokens: int, drafter: Drafter | None = None):
        self.num_tokens = num_tokens
        self.drafter: Drafter = drafter if drafter is not None else NgramDrafter(mode)
        self._misses: dict[int, int] = {}  # drafting-batch uid -> steps without a draft
        self.drafted = self.accepted = 0
        self.verifies = 0

    def forget(self, uid: int) -> None:
        self.drafter.forget(uid)
        self._misses.pop(uid, None)

    def reset(self) -> None:
        self.drafter.reset()
        self._misses.clear()

    def step(self, gen: Any) -> list[Any] | None:
        """One decode step of ``gen``'s generation batches (a list of mlx-lm responses,
        several per drafting sequence), or None for the plain step (no row drafts, and no
        row waits in the drafting batch)."""
        main, side = gen._generation_batch, gen.drafting_batch
        self.drafter.observe((main, side))
        if not self._verifiable(gen):
            return main.next() + side.next() if len(side) else None
        if not len(side) and not any(self._may_draft(main)):
            # no row proposes: the plain step, which does not wait for the pending tokens
            # (reading them would wait for the forward in flight: no step computed ahead)
            return None
        drafts = {**self._drafts(main), **self._drafts(side)}
        if not len(side) and all(drafts.values()):
            with mx.stream(gen.stream):
                return self._verify(main, self._row_drafts(main, drafts))
        if not len(side) and not any(drafts.values()):
            return None
        # A mixed batch: drafting rows verify in the drafting batch, the others decode, when
        # that pays the batch (else every row decodes in the one batch).
        drafting = {uid: d for uid, d in drafts.items() if d}
        if drafting and not self.drafter.split_pays(drafting, len(drafts) - len(drafting)):
            move_rows(gen, list(range(len(side))), to_drafting=False)
            self._misses.clear()
            return None
        side_drafting = any(drafts[uid] for uid in side.uids)
        back = []
        for i, uid in enumerate(side.uids):
            misses = 0 if drafts[uid] else self._misses.get(uid, 0) + 1
            self._misses[uid] = misses
            if misses and (side_drafting or misses > LINGER):
                back.append(i)
        move_rows(gen, back, to_drafting=False)
        main = gen._generation_batch
        move_rows(gen, [i for i, uid in enumerate(main.uids) if drafts[uid]], to_drafting=True)
        main, side = gen._generation_batch, gen.drafting_batch
        self._misses = {uid: self._misses.get(uid, 0) for uid in side.uids}
        responses = main.next()
        with mx.stream(gen.stream):
            if len(side) and all(drafts[uid] for uid in side.uids):
                return responses + self._verify(side, self._row_drafts(side, drafts))
        return responses + side.next()

    @staticmethod
    def _verifiable(gen: Any) -> bool:
        """Whether drafts can be verified now: no prompt being processed, caches that can
        be taken back per batch."""
        batches = (gen._generation_batch, gen.drafting_batch)
        return not (
            len(gen._prompt_batch)
            or gen._unprocessed_sequences
            or not all(verifiable(c) for b in batches for c in b.prompt_cache)
        )

    def _room(self, batch: Any, i: int) -> int:
        """How many tokens row ``i`` of ``batch`` may propose."""
        if not isinstance(batch.samplers[i], RequestSampler):
            return 0  # resample reads the sampler's kind: the engine's samplers only
        return min(self.num_tokens, batch.max_tokens[i] - batch._num_tokens[i] - 1)

    def _may_draft(self, batch: Any) -> list[bool]:
        """Per row of ``batch``: whether it may propose this step."""
        return [
            self._room(batch, i) > 0 and self.drafter.may_propose(uid, len(batch.tokens[i]))
            for i, uid in enumerate(batch.uids)
        ]

    def _drafts(self, batch: Any) -> dict[int, list[int]]:
        """Each row's draft (empty: none), by uid."""
        if not len(batch):
            return {}
        pending = batch._next_tokens.tolist()
        return {
            uid: self.drafter.propose(uid, batch.tokens[i], pending[i], self._room(batch, i))
            for i, uid in enumerate(batch.uids)
        }

    @staticmethod
    def _row_drafts(batch: Any, drafts: dict[int, list[int]]) -> list[list[int]]:
        return [drafts[uid] for uid in batch.uids]

    def _verify(self, batch: Any, proposals: list[list[int]]) -> list[Any]:
        pending = batch._next_tokens.tolist()
        width = max(len(p) for p in proposals)
        inputs = [[t, *p, *[t] * (width - len(p))] for t, p in zip(pending, proposals, strict=True)]
        recurrent = [c for c in batch.prompt_cache if isinstance(c, ArraysCache)]
        kept = [list(c.cache) for c in recurrent]  # references: a forward replaces them
        logits = batch.model(mx.array(inputs), cache=batch.prompt_cache)
        decided, used = [], width + 1
        for i, proposal in enumerate(proposals):
            decided.append(self._decide(batch, i, logits[i], pending[i], proposal, used))
            used = min(used, len(decided[-1]))
        if recurrent and used < width + 1:
            self._replay(batch, recurrent, kept, inputs, used)
        else:
            for c in batch.prompt_cache:
                if c.is_trimmable():
                    c.trim(width + 1 - used)
        self.verifies += 1
        responses, keep_rows = [], []
        for i, (uid, rows, proposal) in enumerate(zip(batch.uids, decided, proposals, strict=True)):
            self._truncate(batch, i, rows, used)
            self.drafted += len(proposal)
            self.accepted += used - 1
            self.drafter.record(uid, len(proposal), len(rows) - 1)
            emitted = [(pending[i], batch._next_logprobs[i])]
            emitted += [(r.token, r.logprobs) for r in rows[: used - 1]]
            batch.tokens[i].extend(t for t, _ in emitted)
            batch._num_tokens[i] += len(emitted)
            done = batch._num_tokens[i] >= batch.max_tokens[i]
            for n, (token, logprobs) in enumerate(emitted):
                last = done and n == len(emitted) - 1
                responses.append(
                    batch.Response(
                        uid=uid,
                        token=token,
                        logprobs=logprobs,
                        finish_reason="length" if last else None,
                        prompt_cache=batch.extract_cache(i) if last else None,
                        all_tokens=batch.tokens[i] if last else None,
                    )
                )
            if done:
                self.forget(uid)
            else:
                keep_rows.append(i)
        batch._next_tokens = mx.array([rows[used - 1].token for rows in decided], dtype=mx.uint32)
        batch._next_logprobs = [rows[used - 1].logprobs for rows in decided]
        if len(keep_rows) < len(batch.uids):
            batch.filter(keep_rows)
        return responses

    @staticmethod
    def _replay(
        batch: Any, recurrent: list[Any], kept: list[list[Any]], inputs: list[list[int]], used: int
    ) -> None:
        """The cache back to before the verify of ``inputs`` (``recurrent`` layers' ``kept``
        states, the others trimmed), then each row's first ``used`` inputs again: a recurrent
        state has no history per position to trim. Only the cache is wanted (the call's
        logits are never evaluated)."""
        for layer, states in zip(recurrent, kept, strict=True):
            layer.cache = states
        for c in batch.prompt_cache:
            if c.is_trimmable():
                c.trim(len(inputs[0]))
        batch.model(mx.array([row[:used] for row in inputs]), cache=batch.prompt_cache)

    @staticmethod
    def _truncate(batch: Any, i: int, rows: list[Decided], used: int) -> None:
        """Row ``i`` keeps its first ``used`` decisions: its later ones are decided again
        next step, so its processors' context and its sampler's key go back to before them."""
        if len(rows) == used:
            return
        if batch.logits_processors[i]:
            context = batch._token_context[i]  # mlx-lm's TokenBuffer: its length is _size
            context._size -= len(rows) - used
        sampler = batch.samplers[i]
        if sampler.seeded:
            sampler.restore_key(rows[used].key)

    @staticmethod
    def _decide(
        batch: Any, i: int, logits: mx.array, pending: int, proposal: list[int], limit: int
    ) -> list[Decided]:
        """Row ``i``'s decided tokens, at most ``limit``: the accepted proposals, then the
        first token that is not a proposal (a correction, or the bonus after them all)."""
        processors = batch.logits_processors[i] or ()
        sampler: RequestSampler = batch.samplers[i]
        decided: list[Decided] = []
        fed = pending
        for j in range(min(len(proposal) + 1, limit)):
            row = logits[j : j + 1]
            if processors:
                context = batch._token_context[i].update_and_fetch(mx.array([fed]))
                for processor in processors:
                    row = processor(context, row)
            logprobs = (row - _token_loop.mx.logsumexp(row, axis=-1, keepdims=True))[0]
            key = sampler.key
            token, kept = resample(sampler, logprobs, proposal[j] if j < len(proposal) else -1)
            decided.append(Decided(token, logprobs, key))
            if not kept:
                break
            fed = token
        return decided
