"""Process memory on the CPU backend: large freed blocks leave the process."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")

# Where glibc puts a 256 KB block after a 1 MB one was freed: once such a free has
# raised glibc's own threshold the block comes from the heap (whose freed holes stay
# resident); with the fixed threshold it is mapped on its own, and unmapped on free.
PROBE = """
import ctypes, sys
from vllm_mlx.models.memory import fix_malloc_threshold
fixed = fix_malloc_threshold() if sys.argv[1] == "fix" else False
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.sbrk.restype = ctypes.c_void_p
libc.sbrk.argtypes = [ctypes.c_ssize_t]
libc.free(libc.malloc(1 << 20))
block = libc.malloc(256 << 10)
print(fixed, block > libc.sbrk(0))  # past the heap's end: a mapping of its own
"""


def probe(mode: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_a_fixed_threshold_maps_large_blocks_on_their_own() -> None:
    assert probe("fix") == "True True"
    assert probe("default") == "False False"  # glibc's own behaviour, which the fix replaces


def test_loading_a_model_freezes_what_it_loaded() -> None:
    """The collector skips the objects alive after a load (a fresh process: the count is
    zero before)."""
    script = (
        "import gc; from vllm_mlx.models import load_model; "
        "before = gc.get_freeze_count(); load_model(None, progress=False); "
        "print(before, gc.get_freeze_count())"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    before, after = map(int, done.stdout.split()[-2:])
    assert before == 0 and after > 10_000
