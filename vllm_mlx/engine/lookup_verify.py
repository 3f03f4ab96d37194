"""Prompt-lookup proposals verified inside mlx-lm's continuous batch.

mlx-lm's ``GenerationBatch`` keeps, between steps, every sequence's cache (the tokens it
has emitted) and a pending token sampled but not yet fed. A lookup step feeds each row its
pending token followed by its proposals (rows with fewer are padded; their padding is
causal, so it changes nothing before it) as one ``[B, 1 + k]`` forward pass, then decides
each row's positions in order with the row's own logits processors and sampler
(``speculative.resample``): greedy keeps a proposal while it is the argmax, a seeded
request draws each position with its own next key as plain decoding would (the same
tokens), an unseeded one accepts a proposal ``d`` with probability ``p(d)`` and otherwise
draws from ``p`` without ``d`` (exactly ``p``). On the native kernels a row of a block has
the one-row decode step's bits (``tests/native/test_row_invariance.py``), so the verified
logits are the ones plain decoding computes.

A step runs only when every row proposes, and every row then keeps as many new positions
as the row that kept fewest (its pending token and accepted proposals, or its correction),
so the batch's cache is trimmed once for all rows, with no per-row shift of the cache. A
row's decisions past that point are taken back (its processors' context shortened, a
seeded sampler's key restored) and decided again next step: they were exact draws, and
where the cut falls depends only on decisions already made, so the tokens keep their
distribution (and a seed its tokens). The sequences carry no stop sequences (the engine
decides stops), so only ``max_tokens`` ends one here; proposals stop one short of it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache

from .lookup import LookupMode, RowLookup, row_lookup
from .sampling import RequestSampler
from .speculative import resample

# The module (the package exports a function of that name): its token loop's ``mx``, whose
# logsumexp a platform may route (the native kernel on the CPU path); normalizing with it
# gives the verified log-probabilities plain decoding's bits.
_token_loop = importlib.import_module("mlx_lm.generate")


@dataclass
class Decided:
    token: int
    logprobs: mx.array
    key: mx.array | None  # the sampler's key before this decision (a seeded request's)


class LookupDecoder:
    """Prompt lookup for a ``BatchGenerator``'s generation batch; generator uids key the
    per-sequence state."""

    def __init__(self, mode: LookupMode, num_tokens: int):
        self.mode = mode
        self.num_tokens = num_tokens
        self.rows: dict[int, RowLookup] = {}
        self.drafted = self.accepted = 0
        self.verifies = 0

    def forget(self, uid: int) -> None:
        self.rows.pop(uid, None)

    def reset(self) -> None:
        self.rows.clear()

    def step(self, gen: Any) -> list[Any] | None:
        """One lookup step of ``gen``'s generation batch (a list of mlx-lm responses, several
        per sequence), or None when no sequence proposes or the batch cannot be verified
        now (a prompt is being processed, a cache type that cannot be trimmed per row)."""
        batch = gen._generation_batch
        if (
            not len(batch)
            or len(gen._prompt_batch)
            or gen._unprocessed_sequences
            or any(type(c) is not BatchKVCache for c in batch.prompt_cache)
        ):
            return None
        pending = batch._next_tokens.tolist()
        proposals = []
        for i, uid in enumerate(batch.uids):
            row = self.rows.get(uid)
            if row is None:
                row = self.rows[uid] = row_lookup(self.mode)
            room = batch.max_tokens[i] - batch._num_tokens[i] - 1
            if not isinstance(batch.samplers[i], RequestSampler):
                room = 0  # resample reads the sampler's kind: the engine's samplers only
            proposals.append(row.proposal(batch.tokens[i], pending[i], min(self.num_tokens, room)))
        if not all(proposals):
            return None  # each row keeps as many positions as the shortest: none gains
        with mx.stream(gen.stream):
            return self._verify(batch, pending, proposals)

    def _verify(self, batch: Any, pending: list[int], proposals: list[list[int]]) -> list[Any]:
        width = max(len(p) for p in proposals)
        inputs = [[t, *p, *[t] * (width - len(p))] for t, p in zip(pending, proposals, strict=True)]
        logits = batch.model(mx.array(inputs), cache=batch.prompt_cache)
        decided, used = [], width + 1
        for i, proposal in enumerate(proposals):
            decided.append(self._decide(batch, i, logits[i], pending[i], proposal, used))
            used = min(used, len(decided[-1]))
        for c in batch.prompt_cache:
            c.trim(width + 1 - used)
        self.verifies += 1
        responses, keep_rows = [], []
        for i, (uid, rows, proposal) in enumerate(zip(batch.uids, decided, proposals, strict=True)):
            self._truncate(batch, i, rows, used)
            self.drafted += len(proposal)
            self.accepted += used - 1
            self.rows[uid].record(len(proposal), len(rows) - 1)
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
