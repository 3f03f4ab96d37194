"""The token source of a sharded server: rank 0 schedules, every rank steps the same batch.

``LeaderSource`` (rank 0) wraps the engine's ``ModelBatchSource``: before each insert,
remove, step or reset it broadcasts the command, and each request's sampler is wrapped so
the token rank 0 samples (after its logits processors: grammars, thinking budgets) is
broadcast inside the step. ``Follower`` (every other rank) replays the commands on its own
``ModelBatchSource`` with samplers that take the broadcast token, so the ranks' batches
stay identical without any rank but 0 running a constraint.

A failed collective (a rank gone) or one that outlasts the watchdog marks the group failed:
the engine then ends every request with an "unavailable" error and refuses new ones.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import mlx.core as mx

from ..engine.generation import AdapterChoice
from ..engine.sampling import Sampler
from ..engine.sources import ModelBatchSource, Step
from ..protocols import LogitsProcessor
from .channel import Channel, Op, broadcast_tokens
from .group import GroupFailed, GroupHealth

log = logging.getLogger(__name__)

EXIT_LINGER = 1.0  # seconds a follower waits after the exit command before closing its sockets


def leader_sampler(sampler: Sampler, group: Any) -> Sampler:
    """A fresh function per request: mlx-lm batches rows that share one sampler object into
    one call, so distinct objects keep the number of collectives equal on every rank."""

    def sample(logprobs: mx.array) -> mx.array:
        return broadcast_tokens(sampler(logprobs), group)

    return sample


def follower_sampler(group: Any) -> Sampler:
    def sample(logprobs: mx.array) -> mx.array:
        return broadcast_tokens(mx.zeros((logprobs.shape[0],), dtype=mx.int32), group)

    return sample


class LeaderSource:
    """A ``TokenSource`` for rank 0 whose every call the followers mirror."""

    def __init__(self, source: ModelBatchSource, channel: Channel, health: GroupHealth):
        self.source = source
        self.channel = channel
        self.health = health
        self.busy_since: float | None = None  # when the running collective call started
        self.on_failure: Callable[[str], None] = lambda reason: None

    def _call(self, work: Callable[[], Any]) -> Any:
        if self.health.failure:
            raise GroupFailed(self.health.failure)
        self.busy_since = time.monotonic()
        try:
            return work()
        except Exception as exc:
            # The followers have already started this command; after a failure halfway
            # through it their collectives no longer match rank 0's: the group is done.
            reason = self.health.fail(f"the rank group failed: {exc}")
            self.on_failure(reason)
            raise GroupFailed(reason) from exc
        finally:
            self.busy_since = None

    def insert(
        self,
        prompt: list[int],
        *,
        sampler: Sampler,
        processors: list[LogitsProcessor],
        max_tokens: int,
        checkpoints: Sequence[int] = (),
        adapter: AdapterChoice | None = None,
    ) -> tuple[int, int]:
        if adapter is not None:
            raise ValueError("adapters are not served by a sharded model")
        payload = {"prompt": list(prompt), "max_tokens": max_tokens}

        def work() -> tuple[int, int]:
            self.channel.send(Op.INSERT, payload=payload)
            return self.source.insert(
                prompt,
                sampler=leader_sampler(sampler, self.channel.group),
                processors=processors,
                max_tokens=max_tokens,
            )

        return self._call(work)

    def remove(self, uid: int) -> None:
        if self.health.failure:
            return

        def work() -> None:
            self.channel.send(Op.REMOVE, uid)
            self.source.remove(uid)

        self._call(work)

    def step(self) -> tuple[list[Step], list[int]]:
        def work() -> tuple[list[Step], list[int]]:
            self.channel.send(Op.STEP)
            return self.source.step()

        return self._call(work)

    def reset(self) -> None:
        if not self.health.failure:
            self._call(lambda: self.channel.send(Op.RESET))
        self.source.reset()

    def close(self) -> None:
        """Tell the followers to exit (when the group still stands)."""
        if not self.health.failure:
            try:
                self._call(lambda: self.channel.send(Op.EXIT))
            except GroupFailed:
                pass

    def flush(self) -> None:
        self.source.flush()

    @property
    def spec_counts(self) -> tuple[int, int]:
        return 0, 0

    def prefill_to_share(self, prompt: list[int]) -> bool:
        return False  # no prefix cache when sharded (docs/distributed.md)


class Follower:
    """Every rank but 0: the same ``ModelBatchSource`` driven by rank 0's commands."""

    def __init__(self, source: ModelBatchSource, channel: Channel):
        self.source = source
        self.channel = channel
        self.steps = 0

    def run(self) -> None:
        """Until rank 0 says exit (returns) or the group breaks (``GroupFailed``)."""
        group = self.channel.group
        while True:
            try:
                op, uid, payload = self.channel.receive()
                if op is Op.EXIT:
                    time.sleep(EXIT_LINGER)  # peers may still be passing the last message on
                    return
                if op is Op.STEP:
                    self.source.step()
                    self.steps += 1
                elif op is Op.INSERT:
                    assert payload is not None
                    self.source.insert(
                        payload["prompt"],
                        sampler=follower_sampler(group),
                        processors=[],
                        max_tokens=payload["max_tokens"],
                    )
                elif op is Op.REMOVE:
                    self.source.remove(uid)
                elif op is Op.RESET:
                    self.source.reset()
            except RuntimeError as exc:
                raise GroupFailed(f"rank {group.rank()}: {exc}") from exc


class Watchdog:
    """Marks the group failed when a collective call outlasts ``timeout`` (a rank that hangs
    without closing its connection) or ``check`` names a reason (a local rank exited)."""

    def __init__(
        self,
        source: LeaderSource,
        timeout: float,
        check: Callable[[], str | None] = lambda: None,
        interval: float = 0.5,
    ):
        self.source, self.timeout, self.check, self.interval = source, timeout, check, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vllm-mlx-watchdog", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval) and not self.source.health.failure:
            reason = self.check()
            since = self.source.busy_since
            if reason is None and since is not None and time.monotonic() - since > self.timeout:
                reason = f"a collective took more than {self.timeout:g} s (a rank hangs)"
            if reason is not None:
                log.error("distributed group failed: %s", reason)
                self.source.on_failure(self.source.health.fail(reason))

    def stop(self) -> None:
        self._stop.set()
