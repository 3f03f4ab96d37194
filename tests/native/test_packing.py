"""``VLLM_MLX_NATIVE_PACKED=auto`` (``native/packing.py``): a model whose routed weights fit
the budget gets packed copies of all of them when it is routed (the bytes ``copy_bytes``
says, freed with the model), one over it none; every row of a batch runs one body."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import make_prompt_cache
from packed_support import MARKS, restored_packed_mode
from test_patch import quantized_llama

from vllm_mlx import native
from vllm_mlx.native import packing, patch

pytestmark = MARKS


@pytest.fixture
def auto() -> Iterator[None]:
    with restored_packed_mode():
        assert native.set_packed_mode("auto")
        yield


def last_logits(model, tokens: mx.array) -> np.ndarray:
    cache = make_prompt_cache(model)
    model(tokens[:, :-1], cache=cache)
    return np.array(model(tokens[:, -1:], cache=cache))


def test_a_model_in_the_budget_is_packed_whole_and_freed_with_its_weights(auto: None) -> None:
    gc.collect()
    entries, filled = native.packed_count()
    model = quantized_llama(4, 32, seed=1)
    patched = patch.enable(model)
    layers = patch._products(model)
    assert patched.packed_bytes == sum(packing.copy_bytes(layer) for layer in layers) > 0
    assert packing.packed_bytes(model) == patched.packed_bytes
    assert native.packed_count() == (entries + len(layers), filled)  # filled by the products
    tokens = mx.random.randint(1, 250, (3, 9))
    packed = last_logits(model, tokens)
    assert native.packed_count() == (entries + len(layers), filled + patched.packed_bytes)
    native.set_packed(False)
    assert not np.array_equal(packed, last_logits(model, tokens))  # the packed body ran
    del model, layers
    gc.collect()
    assert native.packed_count() == (entries, filled)


def test_a_model_over_the_budget_is_not_packed(auto: None, monkeypatch) -> None:
    monkeypatch.setattr(packing, "BUDGET_CAP", 1)
    entries = native.packed_count()[0]
    model = quantized_llama(4, 32, seed=2)
    assert patch.enable(model).packed_bytes == 0 == packing.packed_bytes(model)
    assert native.packed_count()[0] == entries
    tokens = mx.random.randint(1, 250, (2, 9))
    unpacked = last_logits(model, tokens)
    native.set_packed(False)
    assert np.array_equal(unpacked, last_logits(model, tokens))


def test_the_budget_is_the_smaller_of_the_cap_and_a_share_of_memory() -> None:
    assert packing.budget_bytes() == min(2 << 30, int(0.1 * packing.physical_memory()))


def test_a_packed_models_rows_are_the_same_in_any_batch(auto: None) -> None:
    model = quantized_llama(8, 64, seed=3)
    assert patch.enable(model).packed_bytes > 0
    tokens = mx.random.randint(1, 250, (5, 9))
    batch = last_logits(model, tokens)
    for r in range(5):
        assert np.array_equal(batch[r : r + 1], last_logits(model, tokens[r : r + 1])), r


def test_a_bad_mode_fails_the_load(monkeypatch) -> None:
    monkeypatch.setenv(packing.ENV, "yes")
    with pytest.raises(ValueError, match="auto, 1 or 0"):
        packing.check_env()
