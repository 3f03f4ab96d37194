"""The command line's help loads no MLX: ``vllm-mlx --help`` and ``vllm-mlx serve --help``
answer before anything imports mlx or mlx-lm (a fresh interpreter, so other tests' imports
do not count)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
from click.testing import CliRunner
from vllm_mlx.cli import main
result = CliRunner().invoke(main, sys.argv[1:])
assert result.exit_code == 0, result.output
print(sorted(name for name in sys.modules if name.split(".")[0] in ("mlx", "mlx_lm")))
"""


@pytest.mark.parametrize("args", [["--help"], ["serve", "--help"]])
def test_help_loads_no_mlx(args: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
