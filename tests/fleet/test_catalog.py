"""The catalog read from a models directory and its models.toml: names, aliases, paths,
per-model settings validated with the model and field named, and `vllm-mlx models`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from models_dir import write_models_dir

from vllm_mlx.fleet.catalog import CatalogError, build_catalog
from vllm_mlx.options import RuntimeOptions


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return write_models_dir(tmp_path_factory.mktemp("catalog"))


def configured(models, tmp_path, text: str):
    """``models`` with ``text`` as a --model-config (the folder itself stays unchanged)."""
    config = tmp_path / "models.toml"
    config.write_text(text)
    return build_catalog([str(models)], str(config))


def test_folders_and_ggufs_are_found_under_their_names(models):
    catalog = build_catalog([str(models)])
    assert sorted(catalog.entries) == ["coder", "small"]
    assert catalog.entries["small"].spec == str(models / "small.gguf")
    assert catalog.default == "coder"  # none set: the first by name
    assert catalog.entries["coder"].context_length() == 4096  # read from config.json
    assert catalog.entries["coder"].check() is None


def test_models_toml_renames_aliases_adds_and_configures(models, tmp_path):
    (tmp_path / "plain.jinja").write_text("{{ messages[-1].content }}")
    catalog = configured(
        models,
        tmp_path,
        'default = "fast"\n'
        '[models.small]\nserved_name = "fast"\naliases = ["claude-3-5-haiku"]\n'
        'chat_template = "plain.jinja"\ntemperature = 0\nmax_tokens = 8\n'
        '[models.coder]\nreasoning_parser = "r1"\ntool_call_parser = "hermes"\nkv_bits = 8\n'
        '[models.embedded]\npath = "default"\ndraft_model = "fast"\n',
    )
    assert sorted(catalog.entries) == ["coder", "embedded", "fast"]
    assert catalog.default == "fast"
    assert catalog.lookup("claude-3-5-haiku").name == "fast"
    assert catalog.lookup("small") is None  # renamed
    fast = catalog.entries["fast"]
    assert fast.chat_template == "{{ messages[-1].content }}"
    assert fast.settings.options() == {"max_tokens": 8, "temperature": 0.0}
    server = RuntimeOptions.of(max_tokens=64, top_p=0.5, kv_bits=4)
    options = fast.options(server)
    assert (options.request.max_tokens, options.sampling.temperature) == (8, 0.0)
    assert (options.sampling.top_p, options.engine.kv_bits) == (0.5, 4)  # the flags' own
    coder = catalog.entries["coder"].options(RuntimeOptions())
    assert (coder.model.reasoning_parser, coder.model.tool_call_parser) == ("deepseek_r1", "hermes")
    assert coder.engine.kv_bits == 8
    embedded = catalog.entries["embedded"]
    assert embedded.spec == "default" and embedded.draft_spec == fast.spec


@pytest.mark.parametrize(
    "table, message",
    [
        ('reasoning_parser = "nope"', "model 'coder', field 'reasoning_parser': unknown reasoning"),
        ('tool_call_parser = "nope"', "model 'coder', field 'tool_call_parser': unknown tool"),
        ("temperature = 3", "model 'coder', field 'temperature': Input should be less than or"),
        ('max_model_len = "8k"', "model 'coder', field 'max_model_len': Input should be a valid"),
        ("kv_bits = 3", "model 'coder', field 'kv_bits'"),
        ("temprature = 0.5", "model 'coder', field 'temprature': unknown setting"),
        ('chat_template = "missing.jinja"', "model 'coder', field 'chat_template'"),
        ('path = "nowhere"', "model 'coder', field 'path'"),
        ('draft_model = "nothing"', "model 'coder', field 'draft_model'"),
        ('aliases = ["small"]', "model 'coder': id 'small' is already taken by model 'small'"),
    ],
)
def test_a_bad_setting_names_the_model_and_field(models, tmp_path, table, message):
    with pytest.raises(CatalogError, match="models.toml") as caught:
        configured(models, tmp_path, f"[models.coder]\n{table}\n")
    assert message in str(caught.value)


def test_a_bad_file_or_default_is_refused(models, tmp_path):
    with pytest.raises(CatalogError, match="unknown key 'modles'"):
        configured(models, tmp_path, "[modles.coder]\n")
    with pytest.raises(CatalogError, match="default model 'absent'"):
        configured(models, tmp_path, 'default = "absent"\n')
    with pytest.raises(CatalogError, match="model 'ghost': no folder or .gguf"):
        configured(models, tmp_path, "[models.ghost]\nmax_tokens = 3\n")
    with pytest.raises(CatalogError, match="Expected"):  # the TOML parser's own message
        configured(models, tmp_path, "[models.coder\n")


def run_models(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "vllm_mlx", "models", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_the_models_command_lists_what_a_folder_serves(models, tmp_path):
    listed = run_models(str(models))
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0] == f"coder (default)  {models / 'coder'}"
    assert "  loads: yes" in listed.stdout
    rows = [json.loads(line) for line in run_models(str(models), "--json").stdout.splitlines()]
    assert [(r["id"], r["loads"], r["default"]) for r in rows] == [
        ("coder", True, True),
        ("small", True, False),
    ]
    broken = tmp_path / "more"
    (broken / "half").mkdir(parents=True)
    (broken / "half" / "config.json").write_text('{"model_type": "llama"}')
    listed = run_models(str(models), str(broken))
    assert listed.returncode == 1
    assert "half  " in listed.stdout and "loads: no: model folder" in listed.stdout
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "models.toml").write_text('[models.x]\npath = "default"\ntop_p = 2\n')
    listed = run_models(str(bad))
    assert listed.returncode == 1
    assert "model 'x', field 'top_p'" in listed.stderr
