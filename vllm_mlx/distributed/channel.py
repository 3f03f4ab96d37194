"""Rank 0's schedule, broadcast: one small header per command, a payload only for inserts.

Every collective is an ``all_sum`` in which the followers contribute zeros, so what they
receive is exactly what rank 0 sent; all ranks call the same collectives in the same order
(that order is the protocol). They run on the batch generator's stream, after the work it
has in flight (mlx-lm evaluates the next step asynchronously): on another stream a command
could overtake that step's collectives on one rank and not on another. The payload is JSON
(token ids and limits), never pickle: a follower runs no code it receives.
"""

from __future__ import annotations

import json
from enum import IntEnum
from typing import Any

import mlx.core as mx
import numpy as np

HEADER = 4  # op, uid, payload bytes, spare


class Op(IntEnum):
    STEP = 1
    INSERT = 2
    REMOVE = 3
    RESET = 4
    EXIT = 5


class Channel:
    """Commands from rank 0 to every other rank of ``group``, on ``stream``."""

    def __init__(self, group: Any, stream: Any):
        self.group = group
        self.stream = stream

    def _sum(self, array: mx.array) -> mx.array:
        return mx.distributed.all_sum(array, group=self.group, stream=self.stream)

    def send(self, op: Op, uid: int = 0, payload: dict | None = None) -> None:
        data = json.dumps(payload).encode() if payload is not None else b""
        header = mx.array([int(op), uid, len(data), 0], dtype=mx.int32)
        mx.eval(self._sum(header))
        if data:
            mx.eval(self._sum(mx.array(np.frombuffer(data, dtype=np.uint8))))

    def receive(self) -> tuple[Op, int, dict | None]:
        header = [int(v) for v in np.array(self._sum(mx.zeros((HEADER,), dtype=mx.int32)))]
        op, uid, size = Op(header[0]), header[1], header[2]
        if not size:
            return op, uid, None
        data = self._sum(mx.zeros((size,), dtype=mx.uint8))
        return op, uid, json.loads(bytes(np.array(data, copy=False)))


def broadcast_tokens(tokens: mx.array, group: Any) -> mx.array:
    """Rank 0's sampled tokens on every rank (followers pass zeros of the same shape); on
    the current stream, which inside a batch step is the generator's."""
    return mx.distributed.all_sum(tokens.astype(mx.int32), group=group)
