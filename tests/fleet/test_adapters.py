"""Adapters in the catalog: ``[adapters.NAME]`` tables of models.toml (path relative to the
file, base by id, served name), looked up by name or ``BASE:NAME``, every mistake refused
at start-up with the file, adapter and field named."""

from __future__ import annotations

import shutil

import pytest
from models_dir import write_models_dir

from vllm_mlx.fleet.catalog import CatalogError, build_catalog


@pytest.fixture(scope="module")
def models(tmp_path_factory, fleet):
    folder = write_models_dir(tmp_path_factory.mktemp("adapter-catalog"))
    shutil.copytree(fleet.lora, folder.parent / "tuned")
    return folder


def configured(models, tmp_path, text: str):
    config = tmp_path / "models.toml"
    config.write_text(text)
    shutil.copytree(models.parent / "tuned", tmp_path / "tuned", dirs_exist_ok=True)
    return build_catalog([str(models)], str(config))


def test_an_adapter_table_serves_it_on_its_base_by_either_id(models, tmp_path):
    catalog = configured(
        models,
        tmp_path,
        'default = "coder"\n[adapters.tuned]\npath = "tuned"\nbase = "small"\n'
        '[adapters.second]\npath = "tuned"\nserved_name = "coder-tuned"\n',
    )
    entry = catalog.lookup("tuned")
    assert entry is not None and entry.adapter is not None
    assert entry.name == "tuned" and entry.spec == catalog.entries["small"].spec
    assert entry.adapter.path == (tmp_path / "tuned").resolve()
    assert catalog.lookup("small:tuned") == entry
    assert catalog.lookup("coder:tuned") is None  # not that base's adapter
    on_default = catalog.lookup("coder:coder-tuned")
    assert on_default is not None and catalog.base_name(on_default.adapter) == "coder"
    assert catalog.lookup("small") == catalog.entries["small"]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('path = "missing"', "adapter 'x', field 'path': .* is not an adapter folder"),
        ('path = "tuned"\nrank = 8', "adapter 'x', field 'rank': Extra inputs"),
        ('path = "tuned"\nbase = "nope"', "adapter 'x': base 'nope' is not a model"),
        ('path = "tuned"\nserved_name = "small"', "id already taken by model 'small'"),
    ],
)
def test_a_bad_adapter_table_is_refused_naming_it(models, tmp_path, table, message):
    with pytest.raises(CatalogError, match=message):
        configured(models, tmp_path, f"[adapters.x]\n{table}\n")
