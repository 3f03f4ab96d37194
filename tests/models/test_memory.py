"""Process memory on the CPU backend: the heap holes a prompt leaves go back to the
system, and the garbage collector skips what loading created."""

from __future__ import annotations

import subprocess
import sys

import pytest

# 100 blocks of 512 KB freed between 8 KB blocks that stay (what a prompt's buffers leave
# on glibc's heap once a large free has raised its mmap threshold): resident until trimmed.
HOLES = """
import ctypes
from vllm_mlx.native import heap
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def anon_mb():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("RssAnon:")) // 1024
libc.free(libc.malloc(1 << 20))
before = anon_mb()
big, kept = [], []
for _ in range(100):
    block = libc.malloc(512 << 10)
    ctypes.memset(block, 1, 512 << 10)
    big.append(block)
    kept.append(libc.malloc(8 << 10))
for block in big:
    libc.free(block)
held = anon_mb() - before
print(held, heap.trim(), anon_mb() - before)
"""


def run(script: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    return done.stdout.split()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_trimming_returns_the_heap_holes() -> None:
    held, trimmed, left = run(HOLES)
    assert int(held) > 40  # the pattern does leave them resident
    assert trimmed == "True" and int(left) < 5


def test_loading_a_model_freezes_what_it_loaded() -> None:
    """The collector skips the objects alive after a load (a fresh process: the count is
    zero before)."""
    script = (
        "import gc; from vllm_mlx.models import load_model; "
        "before = gc.get_freeze_count(); load_model(None, progress=False); "
        "print(before, gc.get_freeze_count())"
    )
    before, after = map(int, run(script)[-2:])
    assert before == 0 and after > 10_000
