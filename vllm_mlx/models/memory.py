"""Process memory on MLX's CPU backend: how much freed memory the process keeps, and
what the garbage collector has to scan.

Two pools hold freed buffers there. MLX keeps its own (capped here). glibc's malloc keeps
large freed blocks on its heap once its mmap threshold has grown past their size, which
it does by itself after the first large free. After a 2k-token prefill that left
~270 MB resident that no array used (RSS 0.57 GB with 0.19 GB of live arrays); a fixed
64 KB threshold returns such blocks to the system when they are freed (RSS 0.34 GB;
256 KB: 0.36, 32 KB: 0.33). Blocks that size that decode reuses stay in MLX's pool.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import sys

from vllm_mlx.models.errors import ModelLoadError

BUFFER_CACHE_ENV = "VLLM_MLX_CPU_BUFFER_CACHE_MB"
BUFFER_CACHE_MB = 64
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD = 64 << 10  # bytes: blocks from here up are mapped, and unmapped on free


def limit_buffer_cache() -> int | None:
    """Cap MLX's buffer cache on the CPU backend (``VLLM_MLX_CPU_BUFFER_CACHE_MB``, default
    64; a negative value keeps MLX's own limit). Returns the cap in MB, or None.

    A prompt leaves ~40 MB score blocks and dequantized weight blocks in the pool; decode
    reuses only small buffers, so a cap costs prefill a few allocations and frees the rest."""
    import mlx.core as mx

    raw = os.environ.get(BUFFER_CACHE_ENV, str(BUFFER_CACHE_MB))
    try:
        mb = int(raw)
    except ValueError:
        raise ModelLoadError(f"{BUFFER_CACHE_ENV} must be an integer (MB), not {raw!r}") from None
    if mb < 0:
        return None
    mx.set_cache_limit(mb << 20)
    return mb


def fix_malloc_threshold() -> bool:
    """Pin glibc's mmap threshold, so large freed buffers go back to the system. Not
    when the user set ``MALLOC_MMAP_THRESHOLD_`` (glibc reads that itself) or on another
    libc. True when set."""
    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def freeze_loaded_objects() -> None:
    """Move every object alive now (the libraries, the model, its tokenizer: ~90k) out of
    the garbage collector's reach. A decode step allocates a few thousand objects, so a
    full collection came every ~35 tokens and scanned them all (~60 ms here): ~2 ms a
    token on average, on a thread that competes with the kernels for the cores."""
    gc.collect()
    gc.freeze()
