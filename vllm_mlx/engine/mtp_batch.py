"""The model's MTP head drafting inside the continuous batch.

A sequence alone decodes with ``MtpSpeculator``; beside others it drafts here, through
``lookup_verify.LookupDecoder``'s verify (the same exact decisions as prompt lookup's: greedy
keeps plain decoding's tokens, a seeded request its draws, an unseeded one the
distribution). The head needs the main model's final hidden state at every position it
reads, which the batch's forwards do not return: ``HiddenTap`` is the generator's model,
the main model's call split at those states (``Heads.hidden`` then ``Heads.main_logits``,
the call's own arithmetic), keeping each decoding batch's last ones with the uids of its
rows then.

Before each step ``MtpDrafter.observe`` feeds every row's head the positions the last step
kept in the row's cache (one for a plain step; the pending token and the accepted drafts
for a verify) with the tokens that followed them, so the head's last row predicts the token
after the pending one. A row's head has its own KV cache; it starts at the first step the
drafter sees (a prompt's positions have no hidden states kept, as a solo request's prefix
from the prefix cache has none) and starts again after a step it missed. Drafts read less
context then, and verification keeps the output exact whatever they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import trim_prompt_cache

from .lookup import Throttle
from .lookup_verify import ThrottledRows
from .mtp_speculative import Heads, MtpMode


class HiddenTap:
    """The main model as the generator calls it, keeping the final hidden states of each
    call on a batch ``batches()`` returns (keyed by the batch, with its uids then)."""

    def __init__(self, model: Any, heads: Heads, batches: Callable[[], Sequence[Any]]):
        self._model = model
        self._heads = heads
        self._batches = batches
        self.taken: dict[int, tuple[list[int], mx.array]] = {}  # id(batch) -> (uids, hidden)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def __call__(self, inputs: mx.array, cache: Any = None, **kwargs: Any) -> mx.array:
        if kwargs or cache is None:
            return self._model(inputs, cache=cache, **kwargs)
        hidden = self._heads.hidden(inputs, cache)
        for batch in self._batches():
            if batch.prompt_cache is cache:
                self.taken[id(batch)] = (list(batch.uids), hidden)
        return self._heads.main_logits(hidden)


@dataclass
class HeadRow:
    """One sequence's head: its KV rows, how many of the sequence's tokens it has read
    (``seen``: the main cache's length at its last feed) and its last output row, which
    predicts the token after the sequence's pending one."""

    cache: list[Any]
    throttle: Throttle | None
    seen: int = 0
    out: mx.array | None = None
    chain: int = 0  # rows a chained proposal added, trimmed before the next feed
    fresh: bool = True  # no row yet
    first: int | None = None  # the first draft from ``out``, drawn for every row at once


class MtpDrafter(ThrottledRows[HeadRow]):
    """``Drafter`` of the head's greedy proposals, each row with its own head cache (and
    under ``auto`` its own ``Throttle``). ``tap``: the generator's model."""

    def __init__(self, heads: Heads, mode: MtpMode, tap: HiddenTap):
        super().__init__()
        self.heads, self.mode, self.tap = heads, mode, tap

    def observe(self, batches: Sequence[Any]) -> None:
        for batch in batches:
            taken = self.tap.taken.pop(id(batch), None)
            if taken is None or not len(batch):
                continue
            uids, hidden = taken
            pending: list[int] = batch._next_tokens.tolist()
            for i, uid in enumerate(batch.uids):
                if uid in uids:
                    self._feed(uid, batch.tokens[i], pending[i], hidden[uids.index(uid)])
        self._first_drafts()

    def _first_drafts(self) -> None:
        """Every row that may propose gets its first draft from one head-logits call over
        all of them (the output head's weights read once, one wait), not a call each."""
        ready = [
            (row, row.out)
            for row in self.rows.values()
            if row.out is not None
            and row.first is None
            and (row.throttle is None or not row.throttle.paused(row.seen + 1))
        ]
        if not ready:
            return
        outs = mx.concatenate([out for _, out in ready])
        firsts: list[int] = mx.argmax(self.heads.logits(outs)[:, -1], axis=-1).tolist()  # type: ignore[assignment]
        for (row, _), first in zip(ready, firsts, strict=True):
            row.first = first

    def _feed(self, uid: int, tokens: list[int], pending: int, hidden: mx.array) -> None:
        """Row ``uid``'s head reads the last forward's ``hidden`` states ([L, D]) at the
        positions it kept: ``tokens`` (the main cache's) gained them, ``pending`` follows."""
        row = self.rows.get(uid)
        gained = len(tokens) - row.seen if row is not None else 1
        if row is None or not 1 <= gained <= hidden.shape[0]:
            if hidden.shape[0] != 1:
                self.rows.pop(uid, None)  # the positions kept are unknown: start at the next
                return
            row = self.rows[uid] = HeadRow(self.heads.make_cache(), self._throttle())
            gained = 1
        trim_prompt_cache(row.cache, row.chain)
        following = [*tokens[len(tokens) - gained + 1 :], pending]
        at_start = row.fresh and len(tokens) == gained  # the first row is position 0
        out = self.heads.step(hidden[None, :gained], mx.array([following]), row.cache, at_start)
        row.out, row.seen, row.chain, row.fresh = out[:, -1:], len(tokens), 0, False
        row.first = None

    def _throttle(self) -> Throttle | None:
        return Throttle() if self.mode == "auto" else None

    def may_propose(self, uid: int, cached: int) -> bool:
        row = self.rows.get(uid)
        if row is None or row.seen != cached or row.out is None:
            return False
        return row.throttle is None or not row.throttle.paused(cached + 1)

    def propose(self, uid: int, cached: list[int], pending: int, k: int) -> list[int]:
        """Up to ``k`` greedy drafts: the head's last row, then the head on its own output."""
        if not self.may_propose(uid, len(cached)):
            return []
        row = self.rows[uid]
        if row.throttle is not None:
            k = row.throttle.tokens(len(cached) + 1, k)
        proposals: list[int] = []
        out = row.out
        assert out is not None
        for j in range(k):
            if j:
                out = self.heads.step(out, mx.array([proposals[-1:]]), row.cache, False)
                row.chain += 1
            elif row.first is not None:
                proposals.append(row.first)
                continue
            proposals.append(int(mx.argmax(self.heads.logits(out)[0, -1])))
        return proposals

    def record(self, uid: int, proposed: int, accepted: int) -> None:
        row = self.rows.get(uid)
        if row is not None and row.throttle is not None:
            row.throttle.record(proposed, accepted, row.seen)

    def reset(self) -> None:
        super().reset()
        self.tap.taken.clear()
