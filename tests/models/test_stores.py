"""Models other apps downloaded, served where they lie: Ollama's manifest and blob, LM
Studio's folder, the Hugging Face cache; `vllm-mlx models` lists them all."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from tiny_gguf import write_tiny_gguf

from vllm_mlx.cli import main
from vllm_mlx.models import ModelLoadError, resolve_model
from vllm_mlx.models.loader import served_name
from vllm_mlx.models.stores import servable


def pull_into_ollama(root: Path, name: str, tag: str, gguf: Path) -> Path:
    """Lay out ``gguf`` as Ollama's store does: the blob by digest, a manifest naming it
    (with the template and params layers a real pull writes)."""
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    blob = root / "blobs" / f"sha256-{digest}"
    blob.parent.mkdir(parents=True, exist_ok=True)
    if not blob.exists():  # one blob for every tag naming it
        blob.write_bytes(gguf.read_bytes())
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    layers = [
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256-00", "size": 1},
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}",
         "size": blob.stat().st_size},
        {"mediaType": "application/vnd.ollama.image.params", "digest": "sha256-01", "size": 1},
    ]  # fmt: skip
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
    return blob


def test_an_ollama_model_by_its_name(stores: Path) -> None:
    gguf = stores / "src.gguf"
    write_tiny_gguf(gguf)
    blob = pull_into_ollama(stores / "ollama", "tiny", "135m", gguf)
    folder = resolve_model("tiny:135m", progress=False)
    assert (folder / "config.json").is_file()
    assert served_name("tiny:135m", folder) == "tiny:135m"
    assert blob.is_file() and len(list(blob.parent.iterdir())) == 1  # read in place, not copied
    pull_into_ollama(stores / "ollama", "tiny", "latest", gguf)
    assert resolve_model("tiny", progress=False) == folder
    with pytest.raises(ModelLoadError, match="not found: .*a model Ollama pulled"):
        resolve_model("other:1b", progress=False)


def test_an_lmstudio_folder_and_gguf_by_publisher_and_name(stores: Path, tiny_folder: Path) -> None:
    mlx_model = stores / "lmstudio" / "pub" / "tiny-MLX"
    mlx_model.mkdir(parents=True)
    for file in tiny_folder.iterdir():
        (mlx_model / file.name).write_bytes(file.read_bytes())
    ggufs = stores / "lmstudio" / "pub" / "tiny-GGUF"
    ggufs.mkdir(parents=True)
    write_tiny_gguf(ggufs / "tiny-Q8_0.gguf", tensor_types={"token_embd": "Q8_0"})
    write_tiny_gguf(ggufs / "tiny-F32.gguf")
    # HF_ENDPOINT refuses connections: any hub request would fail these
    assert resolve_model("pub/tiny-MLX", progress=False) == mlx_model
    assert (resolve_model("pub/tiny-GGUF:F32", progress=False) / "config.json").is_file()
    with pytest.raises(ModelLoadError, match="several GGUF files"):
        resolve_model("pub/tiny-GGUF", progress=False)


def test_models_lists_everything_servable_with_size_and_place(
    stores: Path, tiny_folder: Path, hub
) -> None:
    resolve_model("org/tiny", progress=False)
    gguf = stores / "src.gguf"
    write_tiny_gguf(gguf)
    blob = pull_into_ollama(stores / "ollama", "tiny", "135m", gguf)
    lms = stores / "lmstudio" / "pub" / "one-GGUF"
    lms.mkdir(parents=True)
    write_tiny_gguf(lms / "one-F32.gguf")
    found = {item.name: item for item in servable()}
    assert set(found) == {"org/tiny", "tiny:135m", "pub/one-GGUF"}
    assert found["tiny:135m"].path == blob and found["tiny:135m"].size == blob.stat().st_size
    assert found["org/tiny"].source == "hf-cache" and found["org/tiny"].size > 100_000
    result = CliRunner().invoke(main, ["models", "--json"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert {r["id"]: r["source"] for r in rows} == {
        "org/tiny": "hf-cache", "tiny:135m": "ollama", "pub/one-GGUF": "lmstudio"
    }  # fmt: skip
    assert all(r["size_mb"] > 0 and Path(r["path"]).exists() for r in rows)
