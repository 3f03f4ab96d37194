"""Models other apps already downloaded, served where they lie (nothing is copied):
Ollama's store (a name's manifest names a GGUF blob), LM Studio's models folder
(``publisher/model/`` like a hub id) and the Hugging Face cache. ``servable()`` lists them
all for ``vllm-mlx models``."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from vllm_mlx.models.hub import complete_folder, hub_cache
from vllm_mlx.models.names import HubRef, gguf_files, pick_gguf, quant_of

OLLAMA_REGISTRY = "registry.ollama.ai"
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
_OLLAMA_NAME = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9][A-Za-z0-9._-]*){0,2}(?::[\w.-]+)?"
)
LMSTUDIO_ENV = "VLLM_MLX_LMSTUDIO_MODELS"


@dataclass(frozen=True)
class Found:
    """One servable model another app (or an earlier download) left on disk."""

    name: str  # what `vllm-mlx serve NAME` takes
    path: Path  # the folder or GGUF file that is served
    size: int  # bytes on disk
    source: str  # "hf-cache", "lmstudio" or "ollama"


def ollama_root() -> Path:
    return Path(os.environ.get("OLLAMA_MODELS") or Path.home() / ".ollama" / "models").expanduser()


def ollama_manifest(name: str) -> Path | None:
    """The manifest file of an Ollama name (``llama3.2:3b``, ``user/model``, ``host/ns/m:t``;
    tag ``latest`` and namespace ``library`` by default), if Ollama has pulled it."""
    if not _OLLAMA_NAME.fullmatch(name):
        return None
    base, _, tag = name.partition(":")
    parts = base.split("/")
    if len(parts) == 1:
        parts = [OLLAMA_REGISTRY, "library", *parts]
    elif len(parts) == 2:
        parts = [OLLAMA_REGISTRY, *parts]
    manifest = ollama_root() / "manifests" / Path(*parts) / (tag or "latest")
    return manifest if manifest.is_file() else None


def ollama_blob(name: str) -> Path | None:
    """The GGUF blob an Ollama name's manifest names (None when Ollama has no such model)."""
    manifest = ollama_manifest(name)
    if manifest is None:
        return None
    try:
        layers = json.loads(manifest.read_text())["layers"]
        digest = next(x["digest"] for x in layers if x.get("mediaType") == OLLAMA_MODEL_LAYER)
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return None
    blob = ollama_root() / "blobs" / str(digest).replace(":", "-")
    return blob if blob.is_file() else None


def lmstudio_roots() -> list[Path]:
    """LM Studio's models folders: ``$VLLM_MLX_LMSTUDIO_MODELS``, the home its pointer file
    names, ``~/.lmstudio/models`` and the older ``~/.cache/lm-studio/models``."""
    if os.environ.get(LMSTUDIO_ENV):
        return [Path(os.environ[LMSTUDIO_ENV]).expanduser()]
    home = Path.home()
    roots = [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]
    try:
        pointed = Path((home / ".lmstudio-home-pointer").read_text().strip())
        roots.insert(0, pointed / "models")
    except OSError:
        pass
    return [root for root in dict.fromkeys(roots) if root.is_dir()]


def lmstudio_model(ref: HubRef) -> Path | None:
    """``publisher/model[:QUANT]`` in LM Studio's folder: its MLX folder or the GGUF the tag
    picks (a folder with several GGUFs and no tag is an error listing them)."""
    if ref.revision is not None:
        return None  # LM Studio keeps one version of a model
    for root in lmstudio_roots():
        folder = root / ref.repo_id
        if not folder.is_dir():
            continue
        if ref.quant is None and complete_folder(folder):
            return folder
        files = [str(p.relative_to(folder)) for p in folder.rglob("*.gguf")]
        chosen = pick_gguf(files, ref.quant, ref.repo_id)
        if chosen is not None:
            return folder / chosen
    return None


def servable() -> list[Found]:
    """Every model in the Hugging Face cache, LM Studio's folder and Ollama's store."""
    return [*_hf_cache(), *_lmstudio(), *_ollama()]


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _folder_or_ggufs(name: str, folder: Path, source: str) -> list[Found]:
    if complete_folder(folder):
        return [Found(name, folder, _size(folder), source)]
    files = gguf_files([str(p.relative_to(folder)) for p in folder.rglob("*.gguf") if p.is_file()])
    many = len(files) > 1
    return [
        Found(f"{name}:{quant_of(f) or Path(f).stem}" if many else name, folder / f,
              _size(folder / f), source)
        for f in files
    ]  # fmt: skip


def _hf_cache() -> list[Found]:
    found: list[Found] = []
    root = hub_cache()
    for storage in sorted(root.glob("models--*--*")) if root.is_dir() else []:
        repo_id = storage.name.removeprefix("models--").replace("--", "/", 1)
        try:
            commit = (storage / "refs" / "main").read_text().strip()
        except OSError:
            snapshots = sorted((storage / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime)
            commit = snapshots[-1].name if snapshots else ""
        snapshot = storage / "snapshots" / commit
        if commit and snapshot.is_dir():
            found.extend(_folder_or_ggufs(repo_id, snapshot, "hf-cache"))
    return found


def _lmstudio() -> list[Found]:
    found: list[Found] = []
    for root in lmstudio_roots():
        for folder in sorted(p for p in root.glob("*/*") if p.is_dir()):
            found.extend(
                _folder_or_ggufs(f"{folder.parent.name}/{folder.name}", folder, "lmstudio")
            )
    return found


def _ollama() -> list[Found]:
    found: list[Found] = []
    manifests = ollama_root() / "manifests"
    for manifest in sorted(manifests.rglob("*")) if manifests.is_dir() else []:
        if not manifest.is_file():
            continue
        parts = manifest.relative_to(manifests).parts
        if len(parts) < 3:
            continue
        host, *middle, model, tag = parts
        namespace = "/".join(middle)
        if host == OLLAMA_REGISTRY and namespace == "library":
            name = f"{model}:{tag}"
        elif host == OLLAMA_REGISTRY:
            name = f"{namespace}/{model}:{tag}"
        else:
            name = f"{host}/{namespace}/{model}:{tag}"
        blob = ollama_blob(name)
        if blob is not None:
            found.append(Found(name, blob, blob.stat().st_size, "ollama"))
    return found
