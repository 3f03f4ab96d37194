"""Tell the model, before each call mlx-lm's batch generator makes, which adapter every
row of that call's batch runs under.

The generator calls the model from a batch's own methods (the generation batch's decode
step, the prompt batch's prefill chunk, and a new generation batch's first step before the
generator holds it), each time with that batch's cache list. The calling batch is the one
whose ``prompt_cache`` is the call's cache: the generator's current batches, else the
caller's ``self``; its ``uids`` (in row order) name the rows. A call that cannot be placed
while sequences under an adapter run fails loudly rather than run them on the base.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import mlx.core as mx

from ..protocols import LayerCache


class RowTarget(Protocol):
    """What the model exposes: the adapter slot of each row of the next call (0: base)."""

    def set_rows(self, slots: Sequence[int] | None) -> None: ...


class GeneratorBatch(Protocol):
    """One of the generator's batches, as a model call is placed in it: its cache list and
    its rows' uids, in row order."""

    prompt_cache: Sequence[LayerCache]
    uids: Sequence[int]


class RowRoutedModel:
    """The model as the generator sees it: every call first sets the rows' adapters."""

    def __init__(
        self,
        model: Any,
        target: RowTarget,
        batches: Callable[[], Sequence[GeneratorBatch]],
        slot_of: dict[int, int],
    ):
        self._model = model
        self._target = target
        self._batches = batches  # the generator's batches now (generation, prompt)
        self._slot_of = slot_of  # generator uid -> adapter slot; absent: the base

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def __call__(
        self, inputs: mx.array, cache: Sequence[LayerCache] | None = None, **kwargs: Any
    ) -> Any:
        slots = self._slots(cache) if self._slot_of else None
        self._target.set_rows(slots)
        try:
            return self._model(inputs, cache=cache, **kwargs)
        finally:
            self._target.set_rows(None)

    def _slots(self, cache: Sequence[LayerCache] | None) -> list[int] | None:
        caller: Any = sys._getframe(2).f_locals.get("self")  # the batch method calling the model
        for batch in (*self._batches(), caller):
            if cache is not None and getattr(batch, "prompt_cache", None) is cache:
                slots = [self._slot_of.get(uid, 0) for uid in batch.uids]
                return slots if any(slots) else None
        raise RuntimeError("a model call outside the generator's batches while adapters run")
