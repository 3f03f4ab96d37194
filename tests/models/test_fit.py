"""The fit check: the estimate against what loading really holds, and a start that would
not fit refused with the numbers or its context capped (and said so)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from mlx.utils import tree_flatten
from tiny_gguf import write_tiny_gguf

from vllm_mlx import native
from vllm_mlx.cli import main
from vllm_mlx.models import ModelLoadError, load_model, resolve_model
from vllm_mlx.models.fit import MEMORY_ENV, RUNTIME_OVERHEAD, estimate, kv_bytes_per_token
from vllm_mlx.models.hub import cached_model
from vllm_mlx.models.names import HubRef
from vllm_mlx.native import packing
from vllm_mlx.options import RuntimeOptions
from vllm_mlx.runtime import build_runtime


def held_bytes(model) -> int:
    return sum(v.nbytes for _, v in tree_flatten(model.parameters()))


@pytest.fixture
def quantized_folder(stores: Path) -> Path:
    """A converted GGUF with Q8_0 layers: packed weights, scales and biases."""
    gguf = stores / "q8.gguf"
    write_tiny_gguf(gguf, tensor_types={"token_embd": "Q8_0", "ffn_down": "Q8_0"})
    return resolve_model(str(gguf), progress=False)


@pytest.mark.parametrize("weights", ["quantized", "float32"])
def test_the_weight_estimate_is_what_loading_holds(quantized_folder: Path, weights) -> None:
    found = estimate(quantized_folder, 4096, weights=weights, on_cpu=True)
    loaded = load_model(str(quantized_folder), cpu_weights=weights, progress=False)
    # as stored, and the native products' packed copies beside them (the kernels may
    # repack a little: within a few %)
    held = held_bytes(loaded.model) + packing.packed_bytes(loaded.model)
    assert found.weights == pytest.approx(held, rel=0.03)


def test_the_estimate_counts_the_packed_copies_the_kernels_make(embedded_model) -> None:
    folder = resolve_model(None, progress=False)
    found = estimate(folder, 4096, weights="quantized", on_cpu=True)
    packed = packing.packed_bytes(embedded_model.model)
    if not packed:
        pytest.skip("the native products take no packed copies on this machine")
    assert found.weights == pytest.approx(held_bytes(embedded_model.model) + packed, rel=0.03)
    native.set_packed_mode("0")
    try:
        alone = estimate(folder, 4096, weights="quantized", on_cpu=True)
    finally:
        native.set_packed_mode("auto")
    assert found.weights - alone.weights == pytest.approx(packed, rel=0.01)


def test_kv_per_token_from_the_config() -> None:
    config = {
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "hidden_size": 576,
    }  # fmt: skip  (SmolLM2-135M)
    assert kv_bytes_per_token(config, None, 64, on_cpu=True) == 30 * 2 * 3 * 64 * 4
    assert kv_bytes_per_token(config, None, 64, on_cpu=False) == 30 * 2 * 3 * 64 * 2
    assert kv_bytes_per_token(config, 8, 64, on_cpu=False) == int(30 * 2 * 3 * 64 * (1 + 4 / 64))


def budget_for(folder: Path, tokens: int) -> float:
    """GB that hold the model's weights, the runtime and ``tokens`` of KV cache."""
    found = estimate(folder, 1, weights="float32", on_cpu=True)
    return (RUNTIME_OVERHEAD + found.weights + tokens * found.kv_per_token) / 2**30


def test_a_context_that_does_not_fit_is_capped(
    tiny_folder: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv(MEMORY_ENV, str(budget_for(tiny_folder, 1000)))
    options = RuntimeOptions.of(prefix_cache_mb=0, cpu_weights="float32")
    runtime = build_runtime(str(tiny_folder), options, progress=False)
    try:
        assert runtime.pipeline.context_length == 768  # 1000 tokens, in steps of 256
    finally:
        runtime.close()
    assert "Context capped to 768 tokens" in capsys.readouterr().err
    with pytest.raises(ModelLoadError, match="a context of 768 tokens fits: --max-model-len 768"):
        build_runtime(str(tiny_folder), options.updated(max_model_len=4096), progress=False)


def test_a_model_that_does_not_fit_is_refused_with_numbers(
    tiny_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MEMORY_ENV, str(budget_for(tiny_folder, 100)))
    with pytest.raises(ModelLoadError, match=r"needs 0\.25 GB .* and 0\.25 GB is available"):
        build_runtime(str(tiny_folder), RuntimeOptions.of(prefix_cache_mb=0), progress=False)


def test_serve_estimate_prints_and_exits(tiny_folder: Path, monkeypatch) -> None:
    monkeypatch.setenv(MEMORY_ENV, "64")
    result = CliRunner().invoke(main, ["serve", str(tiny_folder), "--estimate"])
    assert result.exit_code == 0, result.output
    assert "KV cache" in result.output and "4096 tokens" in result.output
    assert "available     64.00 GB  (VLLM_MLX_MEMORY_GB)" in result.output
    assert "verdict       fits" in result.output
    monkeypatch.setenv(MEMORY_ENV, "0.1")
    result = CliRunner().invoke(main, ["serve", str(tiny_folder), "--estimate"])
    assert "verdict       does not fit" in result.output


def test_estimate_a_hub_model_without_downloading_its_weights(
    hub, tiny_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MEMORY_ENV, "8")
    local = CliRunner().invoke(main, ["serve", str(tiny_folder), "--estimate"])
    remote = CliRunner().invoke(main, ["serve", "org/tiny", "--estimate"])
    assert remote.exit_code == 0, remote.output
    # the same numbers from the safetensors headers on the hub as from the files
    assert remote.output.split("\n", 1)[1] == local.output.split("\n", 1)[1]
    weights = hub.downloads("model.safetensors")
    assert weights and all(r[2] and r[2].startswith("bytes=0-") for r in weights)  # headers only
    assert cached_model(HubRef("org/tiny")) is None  # nothing that looks downloaded
    result = CliRunner().invoke(main, ["serve", "org/absent", "--estimate"])
    assert result.exit_code == 1 and "no model 'org/absent' on the hub" in result.output
