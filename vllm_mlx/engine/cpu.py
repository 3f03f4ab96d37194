"""The Linux CPU fast path: MLX's Linux wheel bundles a reference BLAS; Debian's OpenBLAS,
preloaded, replaces its ``cblas_sgemm`` and makes float32 matmuls ~25x faster (FACTS.md).

A library can only be preloaded before the process starts, so the CLI re-executes itself
once with ``LD_PRELOAD`` set when OpenBLAS is installed and not yet loaded.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

OPENBLAS_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
)
_MARKER = "VLLM_MLX_OPENBLAS_CHECKED"


def find_openblas() -> str | None:
    return next((p for p in OPENBLAS_CANDIDATES if Path(p).exists()), None)


def openblas_preloaded() -> bool:
    return "openblas" in os.environ.get("LD_PRELOAD", "")


def reexec_with_openblas(argv: list[str]) -> None:
    """Replace this process with one that preloads OpenBLAS (Linux only, at most once).

    Returns normally when there is nothing to do: not Linux, already preloaded, no OpenBLAS,
    or already tried.
    """
    if not sys.platform.startswith("linux") or openblas_preloaded() or os.environ.get(_MARKER):
        return
    library = find_openblas()
    if library is None:
        return
    env = dict(os.environ)
    env[_MARKER] = "1"
    env["LD_PRELOAD"] = ":".join(p for p in (library, env.get("LD_PRELOAD", "")) if p)
    os.execve(sys.executable, [sys.executable, "-m", "vllm_mlx", *argv], env)
