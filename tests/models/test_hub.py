"""Hub ids through the real ``huggingface_hub`` download code, against the local stand-in:
only the files a model needs, the cache found again with no request, revisions, GGUF repos
by tag, and errors a user can act on (gated, missing, offline, disk full)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from huggingface_hub import file_download
from tiny_gguf import write_tiny_gguf

from vllm_mlx.models import ModelLoadError, resolve_model
from vllm_mlx.models.hub import cached_model, hub_cache, hub_model
from vllm_mlx.models.loader import served_name
from vllm_mlx.models.names import HubRef, parse_hub_ref

from .hub_standin import HubStandIn, commit_sha


def test_download_fetches_only_what_the_model_needs(hub: HubStandIn) -> None:
    folder = resolve_model("org/tiny", progress=False)
    assert folder.is_relative_to(hub_cache() / "models--org--tiny" / "snapshots")
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"} <= names
    assert "pytorch_model.bin" not in names and "README.md" not in names
    assert not hub.downloads("pytorch_model.bin")
    assert served_name("org/tiny", folder) == "org/tiny"


def test_a_cached_model_starts_with_no_request(hub: HubStandIn) -> None:
    first = resolve_model("org/tiny", progress=False)
    asked = len(hub.requests)
    hub.stop()
    assert resolve_model("org/tiny", progress=False) == first
    assert len(hub.requests) == asked


def test_revision_pins_a_commit_and_a_branch(hub: HubStandIn, stores: Path) -> None:
    old = stores / "repo-old"
    old.mkdir()
    for file in hub.repos["org/tiny"].commits[hub.repos["org/tiny"].refs["main"]].iterdir():
        (old / file.name).write_bytes(file.read_bytes())
    (old / "generation_config.json").write_text('{"temperature": 0.25}')
    sha = hub.add("org/tiny", old, sha=commit_sha("old"), ref="v1")
    pinned = resolve_model(f"org/tiny@{sha}", progress=False)
    assert pinned.name == sha and (pinned / "generation_config.json").is_file()
    assert resolve_model("org/tiny@v1", progress=False) == pinned
    main = resolve_model("org/tiny", progress=False)
    assert main != pinned and not (main / "generation_config.json").exists()
    assert served_name(f"org/tiny@{sha}", pinned) == "org/tiny"
    with pytest.raises(ModelLoadError, match="has no revision 'nope'"):
        resolve_model("org/tiny@nope", progress=False)


def test_gated_and_missing_repos_say_what_to_do(
    hub: HubStandIn, tiny_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub.add("org/gated", tiny_folder, gated=True, token="hf_granted")
    with pytest.raises(ModelLoadError, match="gated repo: accept its licence.*HF_TOKEN"):
        resolve_model("org/gated", progress=False)
    monkeypatch.setenv("HF_TOKEN", "hf_granted")  # the licence accepted, a token set
    assert (resolve_model("org/gated", progress=False) / "model.safetensors").is_file()
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(ModelLoadError, match="no model 'org/absent' on the hub"):
        resolve_model("org/absent", progress=False)


def test_no_network_and_nothing_cached(stores: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ModelLoadError, match="cannot reach the hub .* not in the Hugging Face"):
        resolve_model("org/tiny", progress=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="HF_HUB_OFFLINE is set"):
        resolve_model("org/tiny", progress=False)


class _FullDisk:
    """A download's file that takes ``room`` bytes, then fails as a full disk does."""

    def __init__(self, file, room: int) -> None:
        self.file, self.room = file, room

    def write(self, data: bytes) -> int:
        if len(data) > self.room:
            self.file.write(data[: self.room])
            self.room = 0
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.file.write(data)

    def __getattr__(self, name: str):
        return getattr(self.file, name)


def test_a_full_disk_leaves_nothing_that_looks_usable(
    hub: HubStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = file_download.http_get

    def full_disk(url: str, temp_file, **kwargs) -> None:
        if url.endswith("/model.safetensors"):
            temp_file = _FullDisk(temp_file, 50_000)
        real(url, temp_file, **kwargs)

    monkeypatch.setattr(file_download, "http_get", full_disk)
    with pytest.raises(ModelLoadError, match="disk is full .* resumes where it stopped"):
        resolve_model("org/tiny", progress=False)
    assert cached_model(HubRef("org/tiny")) is None
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="not in the Hugging Face cache"):
        resolve_model("org/tiny", progress=False)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(file_download, "http_get", real)
    folder = resolve_model("org/tiny", progress=False)
    source = hub.repos["org/tiny"].commits[hub.repos["org/tiny"].refs["main"]]
    assert (folder / "model.safetensors").read_bytes() == (
        source / "model.safetensors"
    ).read_bytes()
    assert hub.downloads("model.safetensors")[-1][2] == "bytes=50000-"  # resumed


def test_a_killed_download_resumes(hub: HubStandIn) -> None:
    size = (
        (hub.repos["org/tiny"].commits[hub.repos["org/tiny"].refs["main"]] / "model.safetensors")
        .stat()
        .st_size
    )
    hub.stall["model.safetensors"] = 100_000
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    # `vllm-mlx pull`, writing 16 KB chunks (the library's 10 MB would hold this whole file)
    pull = (
        "import huggingface_hub.constants as c; c.DOWNLOAD_CHUNK_SIZE = 16384; "
        "from vllm_mlx.cli import main; main(['pull', 'org/tiny'])"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", pull], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    blobs = hub_cache() / "models--org--tiny" / "blobs"
    try:
        for _ in range(600):
            partial = [p for p in blobs.glob("*.incomplete")] if blobs.is_dir() else []
            if partial and partial[0].stat().st_size >= 65_536:
                break
            time.sleep(0.05)
        else:
            child.kill()
            pytest.fail(f"the download never started: {child.communicate()[1][-2000:]!r}")
    finally:
        child.kill()
        child.wait()
    kept = partial[0].stat().st_size
    assert 0 < kept < size
    del hub.stall["model.safetensors"]
    folder = hub_model(HubRef("org/tiny"), progress=False)
    assert (folder / "model.safetensors").stat().st_size == size
    assert hub.downloads("model.safetensors")[-1][2] == f"bytes={kept}-"


@pytest.fixture
def gguf_repo(hub: HubStandIn, stores: Path) -> Path:
    repo = stores / "repo-gguf"
    repo.mkdir()
    write_tiny_gguf(repo / "tiny-Q8_0.gguf", tensor_types={"token_embd": "Q8_0"})
    write_tiny_gguf(repo / "tiny-F32.gguf", seed=1)
    (repo / "tiny-Q4_K_M.gguf").write_bytes(b"GGUF not really")
    hub.add("org/tiny-GGUF", repo)
    return repo


def test_gguf_repo_by_tag(hub: HubStandIn, gguf_repo: Path) -> None:
    folder = resolve_model("org/tiny-GGUF:Q8_0", progress=False)
    assert (folder / "config.json").is_file()  # converted once into the model cache
    assert [r[1] for r in hub.requests if r[0] == "GET" and "/resolve/" in r[1]] == [
        f"/org/tiny-GGUF/resolve/{hub.repos['org/tiny-GGUF'].refs['main']}/tiny-Q8_0.gguf"
    ]
    assert served_name("org/tiny-GGUF:Q8_0", folder) == "org/tiny-GGUF:Q8_0"
    asked = len(hub.requests)
    assert resolve_model("org/tiny-GGUF:q8_0", progress=False) == folder
    assert len(hub.requests) == asked


def test_gguf_repo_without_a_tag_lists_the_choices(hub: HubStandIn, gguf_repo: Path) -> None:
    with pytest.raises(ModelLoadError, match="several GGUF files") as error:
        resolve_model("org/tiny-GGUF", progress=False)
    assert "org/tiny-GGUF:Q8_0  (tiny-Q8_0.gguf)" in str(error.value)
    assert "org/tiny-GGUF:F32" in str(error.value)
    with pytest.raises(ModelLoadError, match="no GGUF file tagged 'Q4_0'"):
        resolve_model("org/tiny-GGUF:Q4_0", progress=False)
    before = len(hub.requests)
    with pytest.raises(ModelLoadError, match="imports GGUF files of types .* not Q4_K_M"):
        resolve_model("org/tiny-GGUF:Q4_K_M", progress=False)
    assert len(hub.requests) == before  # refused before asking the hub


def test_a_repo_with_one_gguf_needs_no_tag(hub: HubStandIn, stores: Path) -> None:
    repo = stores / "repo-one"
    repo.mkdir()
    write_tiny_gguf(repo / "model-f32.gguf")
    hub.add("org/one-GGUF", repo)
    assert (resolve_model("org/one-GGUF", progress=False) / "config.json").is_file()


@pytest.mark.parametrize(
    ("spec", "ref"),
    [
        ("org/name", HubRef("org/name")),
        ("org/name@v1.0", HubRef("org/name", "v1.0")),
        ("org/name:Q4_K_M", HubRef("org/name", None, "Q4_K_M")),
        ("org/name@main:Q8_0", HubRef("org/name", "main", "Q8_0")),
        ("org/name:Q8_0@main", HubRef("org/name", "main", "Q8_0")),
        ("smollm2:135m", None),
        ("a/b/c", None),
        ("../x", None),
    ],
)
def test_hub_ids(spec: str, ref: HubRef | None) -> None:
    assert parse_hub_ref(spec) == ref
