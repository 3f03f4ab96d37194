"""Speculative decoding for a sequence running alone (`--draft-model`).

mlx-lm's ``speculative_generate_step`` serves one sequence outside any batch; the engine's
batches come from ``BatchGenerator``, which has no draft. So a request that starts while
nothing else runs is decoded here, and it moves into the batch (cache, tokens and all) the
moment a second request arrives: speculation pays off while the batch is one sequence and
costs more than it gains as it grows (docs/performance.md).

Each step the draft proposes ``num_draft`` tokens greedily; the target scores the pending
token and all proposals in one forward pass; positions are then decided in order with the
request's own logits processors and sampler, exactly as ordinary decoding would decide them:

- greedy: a proposal is kept while it equals the target's argmax, and the first mismatch
  emits the target's argmax instead — the same tokens as decoding without a draft;
- seeded sampling: the position's token is drawn with the request's next key, as ordinary
  decoding draws it, and a proposal is kept while it equals that draw — the same tokens as
  decoding without a draft, so a seed gives one answer with or without speculation, alone
  or batched;
- unseeded sampling: a (deterministic) proposal ``d`` is kept with probability ``p(d)`` and
  otherwise replaced by a draw from ``p`` without ``d`` — together exactly ``p`` (rejection
  sampling with a one-hot draft distribution, which keeps more proposals).

Processors are called once per decided position with that position's context, which holds
only accepted tokens, so they never see a rejected proposal and need no rollback. Both
caches are trimmed back to the accepted tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache

from ..protocols import LayerCache, LogitsProcessor
from .sampling import RequestSampler, log_normalize


def resample(sampler: RequestSampler, logprobs: mx.array, proposal: int) -> tuple[int, bool]:
    """(the token for this position, whether it is ``proposal``), distributed exactly as
    ``sampler(logprobs)`` would be; ``proposal`` < 0: none (the bonus position)."""
    if sampler.greedy:
        token = int(mx.argmax(logprobs))
        return token, token == proposal
    if sampler.seeded:
        token = int(sampler(logprobs[None])[0])
        return token, token == proposal
    weights = sampler.logits(logprobs)
    if proposal < 0:
        return int(mx.random.categorical(weights, key=sampler.next_key())), False
    p = mx.softmax(weights, axis=-1)
    if float(mx.random.uniform(key=sampler.next_key())) < float(p[proposal]):
        return proposal, True
    without = mx.where(mx.arange(weights.shape[-1]) == proposal, -mx.inf, weights)
    return int(mx.random.categorical(without, key=sampler.next_key())), False


@dataclass
class Decided:
    token: int
    logprobs: mx.array


def decide(
    logits: mx.array,
    context: list[int],
    proposals: list[int],
    processors: list[LogitsProcessor],
    sampler: RequestSampler,
) -> list[Decided]:
    """One sequence's positions decided in order from the target's ``logits`` ([1 + k, V]:
    after the pending token and each proposal): the kept proposals, then the first token
    that is not one (a correction, or the bonus after them all). ``context``: the tokens
    before the first position, extended in place with those decided."""
    decided: list[Decided] = []
    for j in range(len(proposals) + 1):
        row = logits[j : j + 1]
        for processor in processors:
            row = processor(mx.array(context), row)
        logprobs = log_normalize(row)[0]
        token, kept = resample(sampler, logprobs, proposals[j] if j < len(proposals) else -1)
        decided.append(Decided(token, logprobs))
        if not kept:
            break
        context.append(token)
    return decided


class Verifying:
    """What a drafted sequence running alone keeps (the target's ``cache`` of ``tokens``,
    the ``pending`` token, the counts) and how a verify settles it, whatever proposed."""

    cache: list[Any]
    tokens: list[int]
    pending: int
    remaining: int
    drafted: int
    accepted: int
    sampler: RequestSampler
    processors: list[LogitsProcessor]

    def settle(self, logits: mx.array, proposals: list[int]) -> list[Decided]:
        """The positions decided from the target's ``logits`` over the pending token and
        ``proposals``; counted, the target's cache trimmed back to the accepted tokens and
        the sequence advanced past them (the proposer's own state is the caller's)."""
        context = [*self.tokens, self.pending]
        decided = decide(logits, context, proposals, self.processors, self.sampler)
        accepted = len(decided) - 1
        self.drafted += len(proposals)
        self.accepted += accepted
        trim_prompt_cache(self.cache, len(proposals) - accepted)
        self.tokens += [self.pending, *proposals[:accepted]]
        self.pending = decided[-1].token
        self.remaining -= len(decided)
        return decided


class SoloSpeculator(Verifying):
    """One sequence decoded with a draft model; ``cache`` holds the KV of ``tokens``, and
    ``pending`` is the next token to feed (emitted, not yet in the cache)."""

    def __init__(
        self,
        model: Any,
        draft: Any,
        *,
        prompt: list[int],
        cache: list[LayerCache],
        cached: int,
        sampler: RequestSampler,
        processors: list[LogitsProcessor],
        max_tokens: int,
        num_draft: int,
        prefill_step_size: int,
    ):
        self.model, self.draft = model, draft
        self.sampler, self.processors = sampler, processors
        self.remaining = max_tokens
        self.num_draft = num_draft
        self.cache = cache
        self.tokens = list(prompt[:-1])
        self.pending = prompt[-1]
        self.draft_cache = make_prompt_cache(draft)
        self.draft_pending: list[int] = [self.pending]
        self.drafted = self.accepted = 0
        _prefill(model, cache, prompt[cached:-1], prefill_step_size)
        _prefill(draft, self.draft_cache, prompt[:-1], prefill_step_size)

    def step(self) -> list[Decided]:
        """At least one decided token (at most ``remaining``)."""
        k = max(0, min(self.num_draft, self.remaining - 1))
        proposals = self._propose(k)
        logits = self.model(mx.array([[self.pending, *proposals]]), cache=self.cache)[0]
        decided = self.settle(logits, proposals)
        accepted = len(decided) - 1
        # The draft was fed pending + proposals[:-1]; keep it up to the last accepted one.
        if k == 0:
            self.draft_pending = [*self.draft_pending, decided[-1].token]
        elif accepted < k:
            trim_prompt_cache(self.draft_cache, k - 1 - accepted)
            self.draft_pending = [decided[-1].token]
        else:
            self.draft_pending = [proposals[-1], decided[-1].token]
        return decided

    def _propose(self, k: int) -> list[int]:
        proposals: list[int] = []
        feed = self.draft_pending
        for _ in range(k):
            logits = self.draft(mx.array([feed]), cache=self.draft_cache)[0, -1]
            proposals.append(int(mx.argmax(logits)))
            feed = proposals[-1:]
        return proposals

    def held(self) -> tuple[list[LayerCache], list[int]]:
        """The target cache and the tokens it holds (for the prefix cache or the batch)."""
        return self.cache, list(self.tokens)


def _prefill(model: Any, cache: list[LayerCache], tokens: list[int], step: int) -> None:
    for start in range(0, len(tokens), step):
        model(mx.array([tokens[start : start + step]]), cache=cache)
        mx.eval([c.state for c in cache])
