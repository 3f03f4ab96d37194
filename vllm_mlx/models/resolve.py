"""Turn a model spec (nothing, a short name, a ``.gguf`` file, a folder, an Ollama name, a
hub id) into a local MLX model folder, converting GGUF files once into a cache that later
starts reuse."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from vllm_mlx.models.default_model import default_gguf, is_default_model_name
from vllm_mlx.models.errors import ModelLoadError
from vllm_mlx.models.gguf import convert_gguf
from vllm_mlx.models.hub import cached_model, hub_model
from vllm_mlx.models.names import parse_hub_ref
from vllm_mlx.models.stores import lmstudio_model, ollama_blob, ollama_manifest

# Bump when the converter's output changes, so stale cache folders are not reused.
CONVERTER_VERSION = 1
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model")
# A staging folder this old belongs to a conversion that was killed, not one still running.
STALE_STAGING_SECONDS = 24 * 3600


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/vllm-mlx`` (``~/.cache/vllm-mlx`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vllm-mlx"


def cache_key(gguf_path: Path) -> str:
    """Identify a GGUF file by location, size and mtime: cheap even for many-GB files."""
    stat = gguf_path.stat()
    identity = f"{gguf_path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|v{CONVERTER_VERSION}"
    return hashlib.sha256(identity.encode()).hexdigest()[:12]


def converted_folder(gguf_path: Path, *, progress: bool = True) -> Path:
    """The cached MLX folder for ``gguf_path``, converting it first if needed.

    Conversion writes into a temporary sibling folder that is renamed into place only once
    complete, so an interrupted conversion never leaves a folder that looks usable.
    """
    models_dir = cache_root() / "models"
    target = models_dir / f"{gguf_path.stem}-{cache_key(gguf_path)}"
    if target.is_dir():
        return target
    try:
        models_dir.mkdir(parents=True, exist_ok=True)
        remove_stale_staging(models_dir, target.name)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=models_dir))
    except OSError as error:
        raise ModelLoadError(f"cannot write the model cache {models_dir}: {error}") from error
    try:
        convert_gguf(gguf_path, staging, progress=progress)
        staging.chmod(0o755)  # mkdtemp's 0700 would hide the folder from other users
        os.replace(staging, target)
    except OSError as error:
        if not target.is_dir():  # a concurrent conversion that won the rename is fine
            raise ModelLoadError(f"could not convert {gguf_path} into {target}: {error}") from error
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def remove_stale_staging(models_dir: Path, name: str) -> None:
    """Delete staging folders for ``name`` left behind by killed conversions."""
    cutoff = time.time() - STALE_STAGING_SECONDS
    for leftover in models_dir.glob(f".{name}-*"):
        if leftover.is_dir() and leftover.stat().st_mtime < cutoff:
            shutil.rmtree(leftover, ignore_errors=True)


def validate_model_folder(folder: Path) -> Path:
    """Check that ``folder`` has what mlx-lm needs, with a message naming what is missing."""
    config_path = folder / "config.json"
    if not config_path.is_file():
        ggufs = sorted(folder.glob("*.gguf"))
        hint = f"; to serve its GGUF, pass the file: {ggufs[0]}" if ggufs else ""
        raise ModelLoadError(f"model folder {folder} has no config.json{hint}")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ModelLoadError(f"{config_path} is not valid JSON: {error}") from error
    if not isinstance(config, dict) or "model_type" not in config:
        raise ModelLoadError(f"{config_path} has no model_type, so no mlx-lm model matches it")
    if not any(folder.glob("model*.safetensors")):
        raise ModelLoadError(f"model folder {folder} has no model*.safetensors weights")
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ModelLoadError(
            f"model folder {folder} has no tokenizer files (expected one of "
            f"{', '.join(TOKENIZER_FILES)})"
        )
    return folder


def resolve_model(spec: str | None, *, progress: bool = True, download: bool = True) -> Path:
    """Return a validated local MLX model folder for ``spec``.

    ``None`` or a short name (``default``, ``smollm2``, …) means the embedded default model;
    a name that is no path is looked up by ``model_by_name`` (``download=False``: only what
    is on disk already).
    """
    if spec is None or is_default_model_name(spec):
        return validate_model_folder(
            converted_folder(default_gguf(cache_root()), progress=progress)
        )
    path = Path(spec).expanduser()
    if not path.exists():
        found = model_by_name(spec, progress=progress, download=download)
        if found is None:
            raise ModelLoadError(
                f"model {spec!r} not found: expected a model folder, a .gguf file, 'default', "
                "a model Ollama pulled (NAME:TAG) or a hub id (ORG/NAME[@REVISION][:QUANT])"
            )
        path = found
    if path.is_file():
        if path.suffix.lower() != ".gguf" and not is_gguf(path):
            raise ModelLoadError(f"model file {path} is not a .gguf file")
        return validate_model_folder(converted_folder(path, progress=progress))
    return validate_model_folder(path)


def is_model_name(spec: str) -> bool:
    """True for a spec that names a model rather than a path: an Ollama name Ollama has
    pulled, or a hub id (the models of LM Studio and the Hugging Face cache included)."""
    if is_default_model_name(spec) or Path(spec).expanduser().exists():
        return False
    return ollama_manifest(spec) is not None or parse_hub_ref(spec) is not None


def display_name(spec: str) -> str:
    """The id a model named by ``spec`` is served under: the hub repo (and GGUF tag)
    without the revision, or the Ollama name as given."""
    if ollama_manifest(spec) is not None:
        return spec
    ref = parse_hub_ref(spec)
    return ref.name if ref is not None else spec


def model_by_name(spec: str, *, progress: bool = True, download: bool = True) -> Path | None:
    """The folder or GGUF file a name stands for: Ollama's store, then for a hub id the
    Hugging Face cache, LM Studio's folder and (``download``) the hub; None when it is no
    such name (or, without ``download``, not on disk)."""
    blob = ollama_blob(spec)
    if blob is not None:
        return blob
    ref = parse_hub_ref(spec)
    if ref is None:
        return None
    local = cached_model(ref) or lmstudio_model(ref)
    if local is not None or not download:
        return local
    return hub_model(ref, progress=progress)


def is_gguf(path: Path) -> bool:
    """A file that starts with GGUF's magic (Ollama's blobs have no suffix)."""
    try:
        with path.open("rb") as file:
            return file.read(4) == b"GGUF"
    except OSError:
        return False
