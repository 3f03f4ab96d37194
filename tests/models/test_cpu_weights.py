"""The switch that puts a whole process tree on the path a Mac takes (quantized weights on
MLX's own kernels, no native extension, no OpenBLAS), and a check that the Mac lane
(scripts/test_mac_path.sh) really runs in that configuration."""

from __future__ import annotations

import os

import httpx
import pytest

from vllm_mlx.models.loader import CPU_WEIGHTS_ENV, choose_weights
from vllm_mlx.native import available as native_available
from vllm_mlx.server.serve_command import serve

MAC_LANE = (
    os.environ.get(CPU_WEIGHTS_ENV) == "quantized" and os.environ.get("VLLM_MLX_NATIVE") == "0"
)


def test_the_environment_decides_what_auto_means(monkeypatch):
    monkeypatch.setenv(CPU_WEIGHTS_ENV, "quantized")
    assert choose_weights("auto") == "quantized"
    assert choose_weights("float32") == "float32"  # an explicit choice still wins
    monkeypatch.setenv(CPU_WEIGHTS_ENV, "bogus")
    with pytest.raises(ValueError, match="bogus"):
        choose_weights("auto")


def test_serve_reads_it_so_a_server_does_not_reexecute_with_openblas(monkeypatch):
    """`serve` re-executes itself with OpenBLAS unless its weights are ``quantized``."""
    monkeypatch.setenv(CPU_WEIGHTS_ENV, "quantized")
    assert serve.make_context("serve", []).params["cpu_weights"] == "quantized"
    monkeypatch.delenv(CPU_WEIGHTS_ENV)
    assert serve.make_context("serve", []).params["cpu_weights"] == "auto"


@pytest.mark.mac_path
@pytest.mark.skipif(not MAC_LANE, reason="the Mac lane's configuration is not set")
def test_the_mac_lane_runs_the_mac_configuration(real_server, tmp_path_factory):
    assert "openblas" not in os.environ.get("LD_PRELOAD", "")
    assert not native_available() and choose_weights("auto") == "quantized"
    health = httpx.get(f"{real_server}/health", timeout=30).json()
    assert health["cpu_kernels"]["enabled"] is False
    logs = list(tmp_path_factory.getbasetemp().glob("server*/server.log"))
    assert logs and all("(quantized weights)" in log.read_text() for log in logs)
