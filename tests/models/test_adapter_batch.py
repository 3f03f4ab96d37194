"""Adapters on one base in one continuous batch: each sequence gets its own adapter's
tokens (mlx-lm's ``load(..., adapter_path=...)``), the base rows the base's, whatever
else shares the batch; the base weights are never changed."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from tiny_adapters import MAX_TOKENS, PROMPT, greedy, make_fleet

from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.models import load_model
from vllm_mlx.models.adapter_set import AdapterSet


def served(fleet):
    loaded = load_model(str(fleet.base))
    adapters = AdapterSet(loaded.model)
    adapters.load("lora", fleet.lora)
    adapters.load("dora", fleet.dora)
    adapters.load("last", fleet.last)
    return loaded, adapters


def run(loaded, adapters, names, prompt=PROMPT, prefix_cache=None):
    """Greedy tokens of one sequence per name (None: the base), inserted together, in
    the names' order."""
    source = ModelBatchSource(loaded.model, adapter_rows=adapters.rows, prefix_cache=prefix_cache)
    out: dict[int, list[int]] = {}
    for name in names:
        extra = {"adapter": adapters.get(name).choice} if name else {}
        uid, _ = source.insert(
            prompt, sampler=greedy, processors=[], max_tokens=MAX_TOKENS, **extra
        )
        out[uid] = []
    while any(len(tokens) < MAX_TOKENS for tokens in out.values()):
        steps, _ = source.step()
        for step in steps:
            out[step.uid].append(step.token)
    return list(out.values())


@pytest.fixture(scope="module")
def quantized(fleet):
    return fleet, *served(fleet)


def test_an_adapter_gives_mlx_lm_s_tokens_and_changes_the_output(quantized):
    fleet, loaded, adapters = quantized
    assert loaded.kernels.startswith("native")  # the fused path is what is stepped around
    for name in ("lora", "dora", "last"):
        assert run(loaded, adapters, [name]) == [fleet.expected[name]]
        assert fleet.expected[name] != fleet.expected[None]
    assert run(loaded, adapters, [None]) == [fleet.expected[None]]


def test_base_and_two_adapters_batched_give_each_one_s_solo_tokens(quantized):
    fleet, loaded, adapters = quantized
    before = {k: mx.array(v) for k, v in tree_flatten(loaded.model.parameters())}
    names = ["lora", None, "dora", "last", "lora"]
    assert run(loaded, adapters, names) == [fleet.expected[name] for name in names]
    after = dict(tree_flatten(loaded.model.parameters()))
    assert all(mx.array_equal(before[k], after[k]) for k in before)


def test_float_weights_match_mlx_lm_too(tmp_path):
    fleet = make_fleet(tmp_path, quantized=False)
    loaded, adapters = served(fleet)
    names = [None, "lora", "dora", "last"]
    assert run(loaded, adapters, names) == [fleet.expected[name] for name in names]


def test_an_unloaded_adapter_no_longer_applies(fleet):
    loaded, adapters = served(fleet)
    choice = adapters.get("lora").choice
    assert adapters.unload("lora")
    source = ModelBatchSource(loaded.model, adapter_rows=adapters.rows)
    uid, _ = source.insert(
        PROMPT, sampler=greedy, processors=[], max_tokens=MAX_TOKENS, adapter=choice
    )
    tokens = []
    while len(tokens) < MAX_TOKENS:
        tokens += [s.token for s in source.step()[0]]
    assert tokens == fleet.expected[None]  # its slot adds nothing any more


def test_only_the_blocks_an_adapter_targets_leave_the_fused_kernels(quantized):
    fleet, loaded, adapters = quantized
    first, second = loaded.model.layers
    rows = adapters.rows
    rows.set_rows([0, adapters.get("last").choice.slot])
    assert not rows.touches(first) and rows.touches(second)
    rows.set_rows([adapters.get("lora").choice.slot, 0])
    assert rows.touches(first) and rows.touches(second)
    rows.set_rows([0, 0])
    assert not rows.active and not rows.touches(second)
    rows.set_rows(None)


def step_logits(loaded, adapters, names, prompt, steps=5):
    """Each sequence's logits at every step, one sequence per name, inserted together."""
    source = ModelBatchSource(loaded.model, adapter_rows=adapters.rows)
    rows = []
    for name in names:
        seen: list[np.ndarray] = []

        def record(tokens, row, seen=seen):
            seen.append(np.array(row))
            return row

        extra = {"adapter": adapters.get(name).choice} if name else {}
        source.insert(prompt, sampler=greedy, processors=[record], max_tokens=steps, **extra)
        rows.append(seen)
    for _ in range(steps):
        source.step()
    return rows


@pytest.mark.parametrize("prompt", [PROMPT, PROMPT * 3], ids=["short", "long"])
def test_a_row_s_logits_do_not_depend_on_its_neighbours_adapters(quantized, prompt):
    """The base rows keep the fused kernels' bits next to adapter rows (an adapter on the
    attention or on the MLP: a block's MLP half stays fused for every row whose adapter
    leaves it alone), and an adapter row has its solo bits next to the base or others."""
    _, loaded, adapters = quantized
    for who in (None, "lora", "dora"):
        alone = step_logits(loaded, adapters, [who], prompt)[0]
        for other in (None, "lora", "dora", "last"):
            batched = step_logits(loaded, adapters, [other, who], prompt)[1]
            assert len(batched) == len(alone)
            same = all(np.array_equal(a, b) for a, b in zip(alone, batched, strict=True))
            assert same, f"{who or 'base'} next to {other or 'base'}"
