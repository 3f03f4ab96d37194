"""The package type-checks (mypy, configured in pyproject.toml): a layer's promise about
what it takes and returns is checked on every change, not only read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_passes_on_the_package():
    run = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
