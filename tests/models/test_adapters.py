"""An adapter folder is checked against the base it is served on: a mismatch is refused
with the tensor, layer or field named, before any weight reaches the model."""

from __future__ import annotations

import json
import shutil

import pytest
from tiny_adapters import write_adapter, write_base

from vllm_mlx.models import load_model
from vllm_mlx.models.adapter_set import AdapterBusy, AdapterCapacity, AdapterSet
from vllm_mlx.models.adapters import AdapterError, read_adapter


@pytest.fixture(scope="module")
def base_model(fleet):
    return load_model(str(fleet.base)).model


def edited(fleet, tmp_path, **changes):
    folder = tmp_path / "edited"
    shutil.copytree(fleet.lora, folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    for key, value in changes.items():
        if key == "rank":
            config["lora_parameters"]["rank"] = value
        else:
            config[key] = value
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


def test_the_files_become_low_rank_updates_of_the_named_layers(fleet, base_model):
    weights = read_adapter(fleet.lora, base_model, "lora")
    assert weights.kind == "lora" and weights.rank == 4
    assert "model.layers.1.self_attn.q_proj" in weights.layers
    dora = read_adapter(fleet.dora, base_model, "dora")
    assert sorted(dora.layers) == [
        f"model.layers.{i}.{k}" for i in (0, 1) for k in ("mlp.down_proj", "self_attn.q_proj")
    ]
    assert all(u.magnitude is not None for u in dora.layers.values())
    assert weights.digest != dora.digest


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"rank": 8}, "not of rank 8"),
        ({"num_layers": 5}, "num_layers 5, the base model has 2 layers"),
        ({"num_layers": 1}, "layer 0 is outside the last 1"),
        ({"fine_tune_type": "full"}, "a full fine-tune is a model"),
    ],
)
def test_a_config_that_does_not_match_its_tensors_or_the_base_is_refused(
    fleet, base_model, tmp_path, changes, named
):
    with pytest.raises(AdapterError, match=named):
        read_adapter(edited(fleet, tmp_path, **changes), base_model, "x")


def test_an_adapter_of_another_base_is_refused_naming_the_layer(base_model, tmp_path):
    other = write_base(tmp_path / "other", hidden=32)
    adapter = write_adapter(other, tmp_path / "other-adapter", seed=3)
    with pytest.raises(
        AdapterError,
        match=r"layers\.0\.mlp\.down_proj: the adapter maps 64 -> 32 features, the base "
        r"layer 128 -> 64",
    ):
        read_adapter(adapter, base_model, "x")


def test_a_folder_that_is_not_an_adapter_is_refused(fleet, base_model, tmp_path):
    with pytest.raises(AdapterError, match="is not a folder"):
        read_adapter(tmp_path / "missing", base_model, "x")
    with pytest.raises(AdapterError, match="adapter_config.json and adapters.safetensors"):
        read_adapter(fleet.base, base_model, "x")


def test_the_least_recently_used_idle_adapter_makes_room(fleet, tmp_path):
    adapters = AdapterSet(load_model(str(fleet.base)).model, max_loaded=1)
    lora = adapters.load("lora", fleet.lora)
    held = adapters.use("lora")
    with pytest.raises(AdapterCapacity):
        adapters.load("dora", fleet.dora)
    with pytest.raises(AdapterBusy):
        adapters.unload("lora")
    adapters.release(held)
    adapters.load("dora", fleet.dora)
    assert [a.name for a in adapters.loaded()] == ["dora"] and adapters.evictions == 1
    assert lora.choice.slot not in adapters.table.slots
    assert adapters.nbytes == adapters.get("dora").nbytes > 0
