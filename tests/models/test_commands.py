"""`vllm-mlx pull` and `vllm-mlx rm` against the hub stand-in, and the start-up line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from tiny_gguf import write_tiny_gguf

from vllm_mlx.cli import main
from vllm_mlx.models.hub import hub_cache
from vllm_mlx.models.resolve import cache_root

from .hub_standin import HubStandIn
from .test_stores import pull_into_ollama


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_pull_then_rm_a_folder_repo(hub: HubStandIn) -> None:
    result = run("pull", "org/tiny")
    assert result.exit_code == 0, result.output
    storage = hub_cache() / "models--org--tiny"
    assert "org/tiny: ready in " + str(storage / "snapshots") in result.output
    asked = len(hub.requests)
    assert run("pull", "org/tiny").exit_code == 0  # brought up to date: listed, not fetched
    assert not [r for r in hub.requests[asked:] if r[0] == "GET" and "/resolve/" in r[1]]
    result = run("rm", "org/tiny")
    assert result.exit_code == 0 and f"removed {storage}" in result.output
    assert not storage.exists()
    result = run("rm", "org/tiny")
    assert result.exit_code == 1 and "not in the Hugging Face cache" in result.output


def test_pull_converts_a_gguf_and_rm_removes_both(hub: HubStandIn, stores: Path) -> None:
    repo = stores / "repo-gguf"
    repo.mkdir()
    write_tiny_gguf(repo / "tiny-F32.gguf")
    write_tiny_gguf(repo / "tiny-Q8_0.gguf", tensor_types={"token_embd": "Q8_0"})
    hub.add("org/tiny-GGUF", repo)
    result = run("pull", "org/tiny-GGUF:F32")
    assert result.exit_code == 0, result.output
    converted = list((cache_root() / "models").glob("tiny-F32-*"))
    assert len(converted) == 1 and (converted[0] / "config.json").is_file()
    result = run("rm", "org/tiny-GGUF:F32")
    assert result.exit_code == 0, result.output
    assert not converted[0].exists()
    assert not list((hub_cache() / "models--org--tiny-GGUF" / "snapshots").rglob("*.gguf"))


def test_errors_are_one_line_without_a_traceback(hub: HubStandIn, stores: Path) -> None:
    hub.add("org/gated", hub.repos["org/tiny"].commits[hub.repos["org/tiny"].refs["main"]],
            gated=True)  # fmt: skip
    result = run("pull", "org/gated")
    assert result.exit_code == 1
    assert "Error: org/gated is a gated repo" in result.output and "Traceback" not in result.output
    gguf = stores / "src.gguf"
    write_tiny_gguf(gguf)
    pull_into_ollama(stores / "ollama", "tiny", "135m", gguf)
    result = run("rm", "tiny:135m")
    assert result.exit_code == 1 and "ollama rm tiny:135m" in result.output
    assert "not a hub id" in run("pull", "not a name").output


def test_no_pytorch_line_whatever_a_command_imports(stores: Path) -> None:
    """transformers announces at import that PyTorch is missing (irrelevant here) unless
    told not to; mlx-lm tells it, but only when imported first, so the CLI tells it."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    env.pop("TRANSFORMERS_NO_ADVISORY_WARNINGS", None)
    child = (
        "from vllm_mlx.cli import main\n"
        "main(['models'], standalone_mode=False)\n"
        "import transformers  # as a subcommand's lazy import would, before mlx-lm\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "no downloaded models found" in done.stdout
    assert "PyTorch was not found" not in done.stderr + done.stdout


def test_pull_offline_keeps_what_is_cached(hub: HubStandIn, monkeypatch) -> None:
    assert run("pull", "org/tiny").exit_code == 0
    hub.stop()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = run("pull", "org/tiny")
    assert result.exit_code == 0 and "org/tiny: ready in" in result.output
    result = run("pull", "org/other")
    assert result.exit_code == 1 and "HF_HUB_OFFLINE is set" in result.output


def test_serve_a_name_that_cannot_be_had_is_one_line(stores: Path) -> None:
    result = run("serve", "org/tiny", "--cpu-weights", "quantized", "--replay", os.devnull)
    assert result.exit_code == 1
    assert "Error: cannot reach the hub" in result.output and "Traceback" not in result.output
