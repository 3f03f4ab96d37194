"""The model's MTP head drafting inside the continuous batch.

A sequence alone decodes with ``MtpSpeculator``; beside others it drafts here, through
``lookup_verify.LookupDecoder``'s verify (the same exact decisions as prompt lookup's: greedy
keeps plain decoding's tokens, a seeded request its draws, an unseeded one the
distribution). The head needs the main model's final hidden state at every position it
reads, which the batch's forwards do not return: ``HiddenTap`` is the generator's model,
the main model's call split at those states (``Heads.hidden`` then ``Heads.main_logits``,
the call's own arithmetic), keeping each decoding batch's last ones with the uids of its
rows then.

The heads of a decoding batch's rows run together, as the batch's main model does: one
``HeadGroup`` per batch holds its rows' head KV in one batched cache (left-padded where a
row's head started later), so a step feeds every row's head in one call and the head's
weights are read once a step, not once a row. Every row of a batch's step keeps the same
number of positions (a verify keeps as many as its row that kept fewest), so a feed is
one ``[B, n]`` call. Before each step ``MtpDrafter.observe`` feeds each row's head the
positions the last step kept in the row's cache (one for a plain step; the pending token
and the accepted drafts for a verify) with the tokens that followed them, so the head's
last row predicts the token after the pending one; rows that moved between the
generator's two batches take their head rows along (a filtered copy of the cache, as the
batch's own move does). A row's head starts at the first step the drafter sees (a
prompt's positions have no hidden states kept, as a solo request's prefix from the
prefix cache has none) and starts again after a step it missed. Drafts read less context
then, and verification keeps the output exact whatever they are.

A chained proposal (``--mtp-tokens`` above 1) runs the head on its own output: each link
is one call over the group's rows, and its cache rows are trimmed before the next feed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx

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
    """One sequence's drafting state: how many of its tokens its head has read (``seen``:
    the main cache's length at its last feed), its first draft (drawn for every row at
    once) and, under ``auto``, its throttle."""

    throttle: Throttle | None
    seen: int = 0
    first: int | None = None

    def paused(self) -> bool:
        """Whether its throttle stops it proposing at its next step."""
        return self.throttle is not None and self.throttle.paused(self.seen + 1)


@dataclass
class HeadGroup:
    """The heads of one decoding batch's rows: row i of ``cache`` (batched) is ``uids[i]``'s.
    ``out``: their last fed output rows, which predict after each row's pending token;
    ``tip``: the last chained link's; ``chained``: each link's drafts, one per row."""

    uids: list[int]
    cache: list[Any]
    out: mx.array | None = None
    tip: mx.array | None = None
    chained: list[list[int]] = field(default_factory=list)


@dataclass
class Feed:
    """What a batch's last forward gives its rows' heads: ``kept`` rows (their heads
    continue) and ``fresh`` ones (their heads start), in the group's order, and the
    positions each keeps (``gained``)."""

    kept: list[int]
    fresh: list[int]
    gained: int


class MtpDrafter(ThrottledRows[HeadRow]):
    """``Drafter`` of the head's greedy proposals, the heads of a batch's rows fed in one
    call (under ``auto`` each row with its own ``Throttle``; ``replay``: its
    ``Throttle.replay``). ``tap``: the generator's model."""

    def __init__(self, heads: Heads, mode: MtpMode, tap: HiddenTap, replay: float = 0.0):
        super().__init__()
        self.heads, self.mode, self.tap, self.replay = heads, mode, tap, replay
        self.groups: dict[int, HeadGroup] = {}  # id(batch) -> its rows' heads

    def observe(self, batches: Sequence[Any]) -> None:
        old = list(self.groups.values())
        for group in old:  # a chain's rows go before anything moves or is fed
            for layer in group.cache:
                layer.trim(len(group.chained))
            group.chained, group.tip = [], None
        live = {uid for batch in batches for uid in batch.uids}
        self.rows = {uid: row for uid, row in self.rows.items() if uid in live}
        self.groups = {}
        feeds = []
        for batch in batches:
            taken = self.tap.taken.pop(id(batch), None)
            if taken is None:
                feed = Feed([u for u in batch.uids if self._place(u, old)], [], 0)
            else:
                feed = self._plan(batch, old, taken[0], taken[1].shape[1])
            assembled = self._assemble(old, feed)
            if assembled is None:
                continue
            self.groups[id(batch)] = assembled
            if taken is not None:
                feeds.append((batch, assembled, feed, taken))
        for batch, fed, feed, (then, hidden) in feeds:
            self._feed(batch, fed, feed, [then.index(u) for u in fed.uids], hidden)
        self._first_drafts()

    def _place(self, uid: int, groups: Sequence[HeadGroup]) -> HeadGroup | None:
        """The group holding ``uid``'s head, if it has one."""
        if uid not in self.rows:
            return None
        return next((g for g in groups if uid in g.uids), None)

    def _plan(self, batch: Any, old: Sequence[HeadGroup], then: list[int], width: int) -> Feed:
        """Which of ``batch``'s rows in its last forward (``then``: its uids, ``width``
        positions a row) continue their heads and which start: a head starts only after
        a one-position step (a row waits for one), and every continuing row keeps the same
        number of positions (else it starts again)."""
        kept: list[int] = []
        fresh: list[int] = []
        gained = 0
        for i, uid in enumerate(batch.uids):
            if uid not in then:
                continue
            row = self.rows.get(uid)
            own = len(batch.tokens[i]) - row.seen if row is not None else 0
            if self._place(uid, old) and 1 <= own <= width and gained in (0, own):
                kept.append(uid)
                gained = own
            elif width == 1:
                fresh.append(uid)
                self.rows[uid] = HeadRow(self._throttle())
            else:
                self.rows.pop(uid, None)  # the positions kept are unknown: start at the next
        return Feed(kept, fresh, gained or 1)

    def _assemble(self, old: Sequence[HeadGroup], feed: Feed) -> HeadGroup | None:
        """The group of ``feed``'s rows: their head rows gathered from the groups that
        held them (a group whose rows all stay is taken as it is), fresh rows appended
        with no positions (left-padded to the others)."""
        wanted = set(feed.kept)
        parts: list[list[Any]] = []
        uids: list[int] = []
        for group in old:
            rows = [j for j, u in enumerate(group.uids) if u in wanted]
            if not rows:
                continue
            if len(rows) == len(group.uids):
                parts.append(group.cache)
            else:
                part = [copy.copy(layer) for layer in group.cache]  # filter rebinds arrays
                for layer in part:
                    layer.filter(rows)
                parts.append(part)
            uids += [group.uids[j] for j in rows]
        if feed.fresh:
            parts.append(self.heads.make_batch_cache(len(feed.fresh)))
            uids += feed.fresh
        if not parts:
            return None
        cache = parts[0]
        for part in parts[1:]:
            for layer, other in zip(cache, part, strict=True):
                layer.extend(other)
        return HeadGroup(uids, cache)

    def _feed(
        self, batch: Any, group: HeadGroup, feed: Feed, then: list[int], hidden: mx.array
    ) -> None:
        """The group's heads read the batch's last forward's ``hidden`` states (rows
        ``then`` of it, in the group's order) at the positions each row kept, with the
        tokens that followed them."""
        index = {uid: i for i, uid in enumerate(batch.uids)}
        pending: list[int] = batch._next_tokens.tolist()
        fresh = set(feed.fresh)
        following, starts = [], []
        for uid in group.uids:
            tokens = batch.tokens[index[uid]]
            following.append([*tokens[len(tokens) - feed.gained + 1 :], pending[index[uid]]])
            starts.append(uid in fresh and len(tokens) == 1)  # the row is position 0
            row = self.rows[uid]
            row.seen, row.first = len(tokens), None
        rows = hidden[mx.array(then)][:, : feed.gained]
        group.out = self.heads.step(rows, mx.array(following), group.cache, starts)[:, -1:]

    def _first_drafts(self) -> None:
        """Every row that may propose gets its first draft from one head-logits call over
        all of them (the output head's weights read once, one wait), not a call each."""
        ready: list[tuple[HeadRow, mx.array]] = []
        for group in self.groups.values():
            if group.out is None:
                continue
            for j, uid in enumerate(group.uids):
                row = self.rows[uid]
                if row.first is None and not row.paused():
                    ready.append((row, group.out[j : j + 1]))
        if not ready:
            return
        outs = mx.concatenate([out for _, out in ready])
        firsts: list[int] = mx.argmax(self.heads.logits(outs)[:, -1], axis=-1).tolist()  # type: ignore[assignment]
        for (row, _), first in zip(ready, firsts, strict=True):
            row.first = first

    def _chain(self, group: HeadGroup) -> None:
        """One more link of every row's chain: the head on its last link's output and
        draft, for all the group's rows in one call (a row proposing less ignores it)."""
        assert group.out is not None
        last = group.chained[-1] if group.chained else [self.rows[u].first or 0 for u in group.uids]
        tip = group.tip if group.tip is not None else group.out
        group.tip = self.heads.step(tip, mx.array([[t] for t in last]), group.cache, False)
        drafts = mx.argmax(self.heads.logits(group.tip)[:, -1], axis=-1).tolist()
        group.chained.append(drafts)  # type: ignore[arg-type]

    def _throttle(self) -> Throttle | None:
        return Throttle(replay=self.replay) if self.mode == "auto" else None

    def may_propose(self, uid: int, cached: int) -> bool:
        row = self.rows.get(uid)
        group = self._place(uid, list(self.groups.values()))
        if row is None or group is None or group.out is None or row.seen != cached:
            return False
        return not row.paused()

    def propose(self, uid: int, cached: list[int], pending: int, k: int) -> list[int]:
        """Up to ``k`` greedy drafts: the row's first, then its chain's links."""
        if not self.may_propose(uid, len(cached)):
            return []
        row = self.rows[uid]
        if row.throttle is not None:
            k = row.throttle.tokens(len(cached) + 1, k)
        if k <= 0 or row.first is None:
            return []
        group = self._place(uid, list(self.groups.values()))
        assert group is not None
        while len(group.chained) < k - 1:
            self._chain(group)
        j = group.uids.index(uid)
        return [row.first, *(link[j] for link in group.chained[: k - 1])]

    def record(self, uid: int, proposed: int, accepted: int) -> None:
        row = self.rows.get(uid)
        if row is not None and row.throttle is not None:
            row.throttle.record(proposed, accepted, row.seen)

    def reset(self) -> None:
        super().reset()
        self.groups.clear()
        self.tap.taken.clear()
