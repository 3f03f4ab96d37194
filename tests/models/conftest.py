"""The environment of the models-by-name tests: every cache and store in the test's tmp
folder, and a hub stand-in (``HF_ENDPOINT``) serving a tiny model as ``org/tiny``."""

from __future__ import annotations

from pathlib import Path

import pytest
from fleet.models_dir import write_tiny_folder

from .hub_standin import HubStandIn


@pytest.fixture
def stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HF cache, converted-model cache, Ollama store and LM Studio folder under tmp_path."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    monkeypatch.setenv("VLLM_MLX_LMSTUDIO_MODELS", str(tmp_path / "lmstudio"))
    # nothing may reach a real hub: an endpoint that refuses connections until a test sets one
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    return tmp_path


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny qwen3 model folder (config, safetensors, tokenizer, template)."""
    return write_tiny_folder(tmp_path_factory.mktemp("tiny") / "tiny")


@pytest.fixture
def hub(stores: Path, monkeypatch: pytest.MonkeyPatch, tiny_folder: Path):
    """The stand-in, serving ``tiny_folder`` as ``org/tiny`` (plus another format's weights
    and a README, which a download must skip)."""
    repo = stores / "repo-main"
    repo.mkdir()
    for file in tiny_folder.iterdir():
        (repo / file.name).write_bytes(file.read_bytes())
    (repo / "pytorch_model.bin").write_bytes(b"\0" * 1000)
    (repo / "README.md").write_text("# tiny\n")
    with HubStandIn() as stand_in:
        stand_in.add("org/tiny", repo)
        monkeypatch.setenv("HF_ENDPOINT", stand_in.url)
        yield stand_in
