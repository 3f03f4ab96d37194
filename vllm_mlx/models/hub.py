"""Models by hub id, through ``huggingface_hub`` into the standard Hugging Face cache.

A cached model is found without any network call (offline is the normal case on a plane);
otherwise only the files a model needs are fetched (``huggingface_hub`` resumes partial
files and shows progress). The library writes each file as ``blobs/*.incomplete`` and links
it into the snapshot only once complete, and a snapshot counts as cached only when every
weight file its index names is there, so an interrupted download never looks usable.
``HF_ENDPOINT``, ``HF_HOME``/``HF_HUB_CACHE``, ``HF_TOKEN`` and ``HF_HUB_OFFLINE`` are read
at each call, as everywhere else.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
from huggingface_hub import (
    HfApi,
    file_download,
    get_hf_file_metadata,
    hf_hub_download,
    hf_hub_url,
    snapshot_download,
)
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import (
    WeakFileLock,
    build_hf_headers,
    disable_progress_bars,
    enable_progress_bars,
    filter_repo_objects,
)

from vllm_mlx.models.errors import ModelLoadError
from vllm_mlx.models.names import HubRef, check_importable_quant, gguf_files, pick_gguf

# What an MLX / Hugging Face model folder needs: config, weights, tokenizer, chat template;
# never another format's weights (*.bin, *.pth, *.gguf, *.onnx, *.msgpack, *.h5).
FOLDER_PATTERNS = [
    "*.json",
    "*.safetensors",
    "*.jinja",
    "*.txt",
    "*.tiktoken",
    "tokenizer.model",
    "tiktoken.model",
]
_COMMIT = re.compile(r"[0-9a-f]{40}")


def hub_cache() -> Path:
    """The Hugging Face cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``~/.cache``)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    )
    return Path(home).expanduser() / "hub"


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def repo_folder(repo_id: str) -> Path:
    return hub_cache() / f"models--{repo_id.replace('/', '--')}"


def snapshot_folder(ref: HubRef) -> Path | None:
    """The cached snapshot for ``ref``'s revision (a commit, or a branch/tag via ``refs/``)."""
    storage = repo_folder(ref.repo_id)
    revision = ref.revision or "main"
    commit = revision if _COMMIT.fullmatch(revision) else None
    if commit is None:
        try:
            commit = (storage / "refs" / revision).read_text().strip()
        except OSError:
            return None
    folder = storage / "snapshots" / commit
    return folder if folder.is_dir() else None


def complete_folder(folder: Path) -> bool:
    """A model folder whose config, tokenizer and every weight file are present."""
    if not (folder / "config.json").is_file():
        return False
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return False
        if not all((folder / shard).is_file() for shard in shards):
            return False
    elif not any(folder.glob("model*.safetensors")):
        return False
    return any((folder / n).is_file() for n in ("tokenizer.json", "tokenizer.model", "vocab.json"))


def cached_model(ref: HubRef) -> Path | None:
    """The cached folder or GGUF file for ``ref``, found with no network call, or None."""
    folder = snapshot_folder(ref)
    if folder is None:
        return None
    if ref.quant is None and complete_folder(folder):
        return folder
    files = [str(p.relative_to(folder)) for p in folder.rglob("*.gguf") if p.is_file()]
    if ref.quant is None and len(gguf_files(files)) != 1:
        return None  # several downloaded: the hub's listing names them all in the error
    try:
        chosen = pick_gguf(files, ref.quant, ref.repo_id)
    except ModelLoadError:
        return None
    return folder / chosen if chosen else None


def hub_model(ref: HubRef, *, progress: bool = True, refresh: bool = False) -> Path:
    """A local folder or GGUF file for ``ref``: the cache when it has it (unless
    ``refresh``), else downloaded. Every failure is a ModelLoadError a user can act on."""
    if not refresh:
        cached = cached_model(ref)
        if cached is not None:
            return cached
    with user_errors(ref):
        return _download(ref, progress)


def remote_facts(ref: HubRef) -> tuple[dict, dict[str, tuple[str, list[int]]]] | None:
    """What a fit estimate needs, without downloading the weights: ``config.json`` (into the
    cache) and each weight tensor's dtype and shape, read from the safetensors headers with
    range requests. None for a repo that is not a safetensors model (a GGUF repo)."""
    with user_errors(ref):
        api = HfApi(endpoint=_endpoint())
        info = api.model_info(ref.repo_id, revision=ref.revision)
        files = [s.rfilename for s in info.siblings or []]
        if "config.json" not in files or not any(f.endswith(".safetensors") for f in files):
            return None
        config_file = hf_hub_download(
            ref.repo_id,
            "config.json",
            revision=info.sha or ref.revision,
            cache_dir=hub_cache(),
            endpoint=_endpoint(),
        )
        config = json.loads(Path(config_file).read_text(encoding="utf-8"))
        headers = api.get_safetensors_metadata(ref.repo_id, revision=info.sha or ref.revision)
    tensors: dict[str, tuple[str, list[int]]] = {
        name: (str(tensor.dtype), list(tensor.shape))
        for file in headers.files_metadata.values()
        for name, tensor in file.tensors.items()
    }
    return (config if isinstance(config, dict) else {}), tensors


@contextmanager
def user_errors(ref: HubRef) -> Iterator[None]:
    """The hub's and the disk's failures as a ModelLoadError saying what to do."""
    if offline():
        raise ModelLoadError(
            f"{ref} is not in the Hugging Face cache ({hub_cache()}) and HF_HUB_OFFLINE is "
            "set: download it once with network (`vllm-mlx pull` or `serve`)"
        )
    try:
        yield
    except ModelLoadError:
        raise
    except GatedRepoError:
        raise ModelLoadError(
            f"{ref.repo_id} is a gated repo: accept its licence on "
            f"https://huggingface.co/{ref.repo_id} and set HF_TOKEN to a token of that account"
        ) from None
    except RepositoryNotFoundError:
        token = " (if it is private, set HF_TOKEN)" if not os.environ.get("HF_TOKEN") else ""
        raise ModelLoadError(f"no model {ref.repo_id!r} on the hub{token}") from None
    except RevisionNotFoundError:
        raise ModelLoadError(f"{ref.repo_id} has no revision {ref.revision!r}") from None
    except RemoteEntryNotFoundError as exc:
        raise ModelLoadError(f"{ref}: a file the listing named is missing: {exc}") from None
    except (httpx2.TransportError, OfflineModeIsEnabled, LocalEntryNotFoundError) as exc:
        raise ModelLoadError(
            f"cannot reach the hub ({_endpoint()}) and {ref} is not in the Hugging Face cache "
            f"({hub_cache()}): {type(exc).__name__}"
        ) from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        raise ModelLoadError(f"the hub answered {status} for {ref}: {_first_line(exc)}") from None
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            free = shutil.disk_usage(_existing_parent(hub_cache())).free
            raise ModelLoadError(
                f"the disk is full while downloading {ref} into {hub_cache()} "
                f"({free / 1e9:.1f} GB free): free space and run the command again; the "
                "download resumes where it stopped, and nothing incomplete is ever loaded"
            ) from None
        raise ModelLoadError(f"could not download {ref} into {hub_cache()}: {exc}") from None


def _download(ref: HubRef, progress: bool) -> Path:
    """List the repo at its revision, then fetch the one GGUF it names or the folder's files."""
    check_importable_quant(ref.quant, ref.repo_id)
    info = HfApi(endpoint=_endpoint()).model_info(ref.repo_id, revision=ref.revision)
    files = [s.rfilename for s in info.siblings or []]
    has_folder = "config.json" in files and any(f.endswith(".safetensors") for f in files)
    if ref.quant is not None or not has_folder:
        chosen = pick_gguf(files, ref.quant, ref.repo_id)
        if chosen is not None:
            fetch_resumable(ref.repo_id, chosen, info.sha or ref.revision, progress)
            local = hf_hub_download(
                ref.repo_id,
                chosen,
                revision=ref.revision,
                cache_dir=hub_cache(),
                endpoint=_endpoint(),
            )
            return Path(local)
        problem = "no config.json" if "config.json" not in files else "no safetensors weights"
        raise ModelLoadError(
            f"{ref} has {problem} and no GGUF file, so vllm-mlx cannot serve it (it needs an "
            f"MLX / safetensors model or a GGUF); its files: {', '.join(sorted(files)[:12])}"
        )
    for name in filter_repo_objects(files, allow_patterns=FOLDER_PATTERNS):
        if name.endswith(".safetensors"):
            fetch_resumable(ref.repo_id, name, info.sha or ref.revision, progress)
    with _progress(progress):
        folder = Path(
            snapshot_download(
                ref.repo_id,
                revision=ref.revision,
                cache_dir=hub_cache(),
                endpoint=_endpoint(),
                allow_patterns=FOLDER_PATTERNS,
            )
        )
    if not complete_folder(folder):
        raise ModelLoadError(f"{ref} downloaded into {folder} but lacks tokenizer or weights")
    return folder


def fetch_resumable(repo_id: str, filename: str, revision: str | None, progress: bool) -> None:
    """Download one weight file into the cache's ``blobs/<etag>``, continuing the
    ``<etag>.incomplete`` a killed or failed download left. huggingface_hub 2.x starts each
    download afresh (in a per-process file it deletes on failure), so a multi-GB download
    cut at 90% would start over; with the blob in place it only links the file."""
    url = hf_hub_url(repo_id, filename, revision=revision, endpoint=_endpoint())
    meta = get_hf_file_metadata(url, endpoint=_endpoint())
    if meta.etag is None or meta.location is None:
        return  # nothing to name the blob by: the library downloads it whole
    storage = repo_folder(repo_id)
    blob = storage / "blobs" / meta.etag
    partial = blob.with_name(f"{meta.etag}.incomplete")
    lock = hub_cache() / ".locks" / storage.name / f"{meta.etag}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    blob.parent.mkdir(parents=True, exist_ok=True)
    with WeakFileLock(str(lock)):
        if blob.exists():
            return
        with _progress(progress), partial.open("ab") as out:
            try:
                file_download.http_get(
                    meta.location,
                    out,
                    resume_size=out.tell(),
                    headers=build_hf_headers(),
                    expected_size=meta.size,
                    displayed_filename=filename,
                )
            except OSError as error:
                if error.errno != errno.ENOSPC and not isinstance(error, HfHubHTTPError):
                    partial.unlink(missing_ok=True)  # inconsistent bytes: start over next time
                raise
        os.replace(partial, blob)


@contextmanager
def _progress(show: bool) -> Iterator[None]:
    """huggingface_hub's progress bars, turned off for the duration when not ``show``."""
    if show:
        yield
        return
    disable_progress_bars()
    try:
        yield
    finally:
        enable_progress_bars()


def _endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def _first_line(exc: Exception) -> str:
    return next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)


def _existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path
