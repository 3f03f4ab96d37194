"""Each model call the generator makes is told its rows' adapter slots, found from the batch
whose cache the call carries; a call that cannot be placed while adapters run fails."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from vllm_mlx.engine.adapter_rows import RowRoutedModel


class Recorder:
    def __init__(self):
        self.calls: list = []

    def set_rows(self, slots):
        self.calls.append(slots)


def model(inputs, cache=None):
    return inputs


def test_rows_come_from_the_batch_whose_cache_the_call_carries():
    rows = Recorder()
    generation = SimpleNamespace(uids=[4, 7, 9], prompt_cache=["g"])
    prompt = SimpleNamespace(uids=[11], prompt_cache=["p"])
    slot_of = {7: 2, 11: 5}
    routed = RowRoutedModel(model, rows, lambda: [generation, prompt], slot_of)
    routed("x", cache=generation.prompt_cache)
    routed("x", cache=prompt.prompt_cache)
    assert rows.calls == [[0, 2, 0], None, [5], None]  # set before each call, cleared after
    slot_of.clear()
    routed("x", cache=["other"])  # no adapter rows: nothing to place
    assert rows.calls[-2:] == [None, None]


def test_a_batch_the_generator_does_not_hold_yet_is_the_caller_s():
    rows = Recorder()
    routed = RowRoutedModel(model, rows, lambda: [], {3: 1})

    class NewBatch:  # as a generation batch's first step runs inside its constructor
        def __init__(self):
            self.uids, self.prompt_cache = [2, 3], ["new"]
            routed("x", cache=self.prompt_cache)

    NewBatch()
    assert rows.calls[0] == [0, 1]
    with pytest.raises(RuntimeError, match="outside the generator's batches"):
        routed("x", cache=["foreign"])
