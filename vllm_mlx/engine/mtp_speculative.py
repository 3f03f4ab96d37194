"""Speculative decoding with the model's own multi-token-prediction head (``--mtp``).

A model trained with MTP layers (DeepSeek-V3/R1, GLM-4.5, MiMo, Qwen3-Next;
``models/mtp_heads.py`` reads them) predicts the token after next from its last hidden
state and the next token: a draft at the cost of one decoder layer, with no second model.
Like a draft model it runs a sequence alone (``ModelBatchSource`` moves it into the batch
when another request arrives), and its proposals are verified exactly as the draft model's are
(``speculative.decide``): greedy outputs are the tokens plain decoding gives, a seeded
request draws each position with its own next key (the same tokens), an unseeded one keeps
a proposal by exact rejection.

The head keeps its own KV cache, one row per position of the sequence it has seen: the row
at position i reads the main model's hidden state there and the token at i + 1. Each
verify gives the main model's hidden states of the pending token and the accepted
proposals, so after it the head is fed those true rows; rows it made for a chain (a
second proposal reads the head's own output, not the main model's) are trimmed first.
The head's cache starts where the request's prefill does: a prefix from the prefix cache
has no hidden states, so its positions are not in the head's context (a draft reads less
context there; verification keeps the output exact either way).

Qwen3-Next's main model mixes full attention with Gated DeltaNet layers whose caches (a
convolution's last inputs and a recurrent state, ``ArraysCache``) hold no per-position
history, so a verify cannot be trimmed back there. Their states are kept before each
verify that proposes; after a partial accept they are restored, the attention layers'
caches trimmed back to the same point, and the pending token and the accepted proposals
run again (one more forward of accepted + 1 tokens; a full accept needs none). The
decided tokens are the verify's either way, so the output stays plain decoding's.

Under ``auto`` a ``lookup.Throttle`` decides per step how many tokens to propose from the
acceptance so far, and stops proposing for a while (plain one-token steps, the head still
fed) when drafts do not pay (on Qwen3-Next counting the replay a partial accept adds);
``on`` always proposes ``num_draft``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

import mlx.core as mx
from mlx_lm.models.cache import ArraysCache, trim_prompt_cache

from ..protocols import LogitsProcessor
from .lookup import Throttle
from .sampling import RequestSampler
from .speculative import Decided, Verifying

MtpMode = Literal["auto", "on", "off"]
Checkpoint = tuple[int, Callable[[list[int], list[Any]], None]]
MTP_MODES: tuple[MtpMode, ...] = ("auto", "on", "off")


class Heads(Protocol):
    """What the drafter asks of a model's MTP head (``models.mtp_heads.MtpHeads``)."""

    def make_cache(self) -> list[Any]: ...

    def make_batch_cache(self, rows: int) -> list[Any]:
        """An empty cache for ``rows`` sequences' heads run together (a batched one)."""

    def hidden(self, inputs: mx.array, cache: list[Any]) -> mx.array:
        """The main model's final hidden states ([1, L, D]); its cache advances."""

    def main_logits(self, hidden: mx.array) -> mx.array:
        """The main model's logits from those hidden states."""

    def step(
        self, hidden: mx.array, tokens: mx.array, cache: list[Any], at_start: bool | Sequence[bool]
    ) -> mx.array:
        """The head's output rows for (hidden state, next token) rows ([B, L] of them);
        ``at_start``: a row's first is absolute position 0 (for all rows, or one a row)."""

    def logits(self, out: mx.array) -> mx.array:
        """The head's logits from its output rows: the token after the next one."""


def restorable(cache: list[Any]) -> bool:
    """Whether a verify can be undone in every layer of ``cache``: trimmed, or (a recurrent
    layer's ``ArraysCache``) restored from the states kept before it."""
    return all(c.is_trimmable() or isinstance(c, ArraysCache) for c in cache)


class MtpSpeculator(Verifying):
    """One sequence decoded with its model's MTP head; ``cache`` holds the main model's KV
    of ``tokens``, ``pending`` is the next token to feed (emitted, not yet in the cache).
    ``checkpoint``: (a prompt offset, what to call with the prompt up to it and the cache
    holding exactly that) — an untrimmable cache's message checkpoint for the prefix cache."""

    def __init__(
        self,
        model: Any,
        heads: Heads,
        *,
        prompt: list[int],
        cache: list[Any],
        cached: int,
        sampler: RequestSampler,
        processors: list[LogitsProcessor],
        max_tokens: int,
        num_draft: int,
        prefill_step_size: int,
        throttle: Throttle | None,
        checkpoint: Checkpoint | None = None,
    ):
        self.model, self.heads = model, heads
        self.sampler, self.processors = sampler, processors
        self.remaining = max_tokens
        self.num_draft = num_draft
        self.throttle = throttle
        self.cache = cache
        self.tokens = list(prompt[:-1])
        self.pending = prompt[-1]
        self.head_cache = heads.make_cache()
        self.recurrent = [c for c in cache if not c.is_trimmable()]  # restored, not trimmed
        self.at_start = cached == 0  # the head's next row is absolute position 0
        self.out: mx.array | None = None  # the head's last row: it predicts after ``pending``
        self.drafted = self.accepted = 0
        cut = checkpoint[0] if checkpoint is not None else None
        ends = [e for e in (cut, len(prompt) - 1) if e is not None]
        begin = cached
        for end in ends:
            for start in range(begin, end, prefill_step_size):
                chunk = prompt[start : min(start + prefill_step_size, end)]
                hidden = heads.hidden(mx.array([chunk]), cache)
                self._feed(hidden, prompt[start + 1 : start + 1 + len(chunk)])
                mx.eval(self.out, [c.state for c in (*cache, *self.head_cache)])
            if checkpoint is not None and end == cut:
                checkpoint[1](list(prompt[:cut]), cache)
            begin = end

    def _feed(self, hidden: mx.array, following: list[int]) -> None:
        """The head's rows for the main model's ``hidden`` states and the tokens after them."""
        out = self.heads.step(hidden, mx.array([following]), self.head_cache, self.at_start)
        self.at_start = False
        self.out = out[:, -1:]

    def step(self) -> list[Decided]:
        """At least one decided token (at most ``remaining``)."""
        k = max(0, min(self.num_draft, self.remaining - 1)) if self.out is not None else 0
        if k and self.throttle is not None:
            k = self.throttle.tokens(len(self.tokens), k)
        proposals = self._propose(k)
        emitted = len(self.tokens)
        kept = [list(c.cache) for c in self.recurrent] if k else []
        hidden = self.heads.hidden(mx.array([[self.pending, *proposals]]), self.cache)
        decided = self.settle(self.heads.main_logits(hidden)[0], proposals)
        accepted = len(decided) - 1
        if kept and accepted < k:
            self._replay(kept, emitted)
        if k and self.throttle is not None:
            self.throttle.record(k, accepted, emitted)
        trim_prompt_cache(self.head_cache, max(0, k - 1))  # the chain's own rows
        self._feed(hidden[:, : accepted + 1], [d.token for d in decided])
        mx.eval(self.out)  # the head's rows now: a paused request would grow one lazy graph
        return decided

    def _replay(self, kept: list[list[Any]], before: int) -> None:
        """The main cache back to its ``before`` tokens (the recurrent layers' ``kept``
        states, the others trimmed), then the verify's accepted tokens run again."""
        for layer, states in zip(self.recurrent, kept, strict=True):
            layer.cache = states
        for layer in self.cache:
            if layer.is_trimmable():
                layer.trim(layer.offset - before)
        self.heads.hidden(mx.array([self.tokens[before:]]), self.cache)

    def _propose(self, k: int) -> list[int]:
        """``k`` greedy drafts: the head's last row, then the head run on its own output."""
        proposals: list[int] = []
        out = self.out
        for j in range(k):
            assert out is not None
            if j:
                out = self.heads.step(out, mx.array([proposals[-1:]]), self.head_cache, False)
            proposals.append(int(mx.argmax(self.heads.logits(out)[0, -1])))
        return proposals

    def held(self) -> tuple[list[Any], list[int]]:
        """The main cache and the tokens it holds (for the prefix cache or the batch)."""
        return self.cache, list(self.tokens)
