"""``vllm-mlx pull`` and ``vllm-mlx rm``: fetch a hub model (and convert a GGUF) without
serving it; delete what was downloaded, with the folders converted from it."""

from __future__ import annotations

import shutil
from pathlib import Path

from huggingface_hub import scan_cache_dir
from huggingface_hub.errors import CacheNotFound

from vllm_mlx.models.errors import ModelLoadError
from vllm_mlx.models.hub import cached_model, hub_cache, hub_model, offline, repo_folder
from vllm_mlx.models.names import HubRef, parse_hub_ref
from vllm_mlx.models.resolve import cache_key, cache_root, resolve_model
from vllm_mlx.models.stores import lmstudio_model, ollama_blob


def pull(spec: str, *, progress: bool = True) -> Path:
    """Download ``spec`` (a hub id) into the Hugging Face cache, or bring a cached copy up
    to date, and convert a GGUF; the served MLX folder is returned."""
    if ollama_blob(spec) is not None:
        return resolve_model(spec, progress=progress)  # Ollama has it: only the conversion
    ref = _hub_ref(spec)
    if not (offline() and cached_model(ref) is not None):
        hub_model(ref, progress=progress, refresh=True)
    return resolve_model(spec, progress=progress)


def remove(spec: str) -> list[Path]:
    """Delete a hub model from the Hugging Face cache (a revision, a GGUF tag's file, or
    the whole repo) and the folders converted from its GGUFs; the paths removed."""
    if ollama_blob(spec) is not None:
        raise ModelLoadError(f"{spec} is in Ollama's store: remove it with `ollama rm {spec}`")
    ref = _hub_ref(spec)
    storage = repo_folder(ref.repo_id)
    if not storage.is_dir():
        where = " (it is in LM Studio's folder: remove it there)" if lmstudio_model(ref) else ""
        raise ModelLoadError(f"{ref} is not in the Hugging Face cache {hub_cache()}{where}")
    if ref.quant is not None:
        target = cached_model(ref)
        if target is None or not target.is_file():
            raise ModelLoadError(f"no downloaded GGUF for {ref} in {storage}")
        removed = _converted(target)
        blob = target.resolve()
        target.unlink()
        blob.unlink(missing_ok=True)
        return [*removed, target]
    if ref.revision is not None:
        return _remove_revision(ref, storage)
    removed = [c for gguf in storage.rglob("snapshots/*/**/*.gguf") for c in _converted(gguf)]
    shutil.rmtree(storage)
    return [*removed, storage]


def _remove_revision(ref: HubRef, storage: Path) -> list[Path]:
    try:
        repos = scan_cache_dir(hub_cache()).repos
    except CacheNotFound:
        repos = frozenset()
    for repo in repos:
        if repo.repo_id != ref.repo_id or repo.repo_type != "model":
            continue
        for revision in repo.revisions:
            if revision.commit_hash.startswith(str(ref.revision)) or ref.revision in revision.refs:
                removed = [c for f in revision.files for c in _converted(f.file_path)]
                scan_cache_dir(hub_cache()).delete_revisions(revision.commit_hash).execute()
                return [*removed, revision.snapshot_path]
    raise ModelLoadError(f"revision {ref.revision!r} of {ref.repo_id} is not in {storage}")


def _converted(gguf: Path) -> list[Path]:
    """The converted MLX folder of a downloaded GGUF, removed (as a list of 0 or 1)."""
    if gguf.suffix.lower() != ".gguf" or not gguf.exists():
        return []
    folder = cache_root() / "models" / f"{gguf.stem}-{cache_key(gguf)}"
    if not folder.is_dir():
        return []
    shutil.rmtree(folder)
    return [folder]


def _hub_ref(spec: str) -> HubRef:
    ref = parse_hub_ref(spec)
    if ref is None:
        raise ModelLoadError(
            f"{spec!r} is not a hub id (ORG/NAME[@REVISION][:QUANT]) nor a model Ollama pulled"
        )
    return ref
