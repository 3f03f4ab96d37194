"""The embedded default model (SmolLM2-135M-Instruct, Q4_1 GGUF) converted and run for real."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest
from mlx_lm import stream_generate

from vllm_mlx.models import LoadedModel, load_model, resolve, resolve_model
from vllm_mlx.models.default_model import default_gguf

pytestmark = pytest.mark.slow
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="session")
def default_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private XDG cache holding the default model, converted once per session."""
    cache = tmp_path_factory.mktemp("xdg-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(cache))
        resolve_model(None, progress=False)
    return cache


def load_default(cache: Path, weights: str) -> LoadedModel:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(cache))
        return load_model(None, cpu_weights=weights, progress=False)


@pytest.fixture(scope="module")
def quantized(default_cache: Path) -> LoadedModel:
    return load_default(default_cache, "quantized")


@pytest.fixture(scope="module")
def dense(default_cache: Path) -> LoadedModel:
    return load_default(default_cache, "float32")


def greedy(loaded: LoadedModel, max_tokens: int = 12) -> tuple[str, list[int]]:
    prompt = loaded.tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True)
    text, tokens = "", []
    for response in stream_generate(loaded.model, loaded.tokenizer, prompt, max_tokens=max_tokens):
        text += response.text
        tokens.append(response.token)
    return text, tokens


def test_default_model_answers_paris(quantized: LoadedModel) -> None:
    text, _ = greedy(quantized)
    assert "Paris" in text
    assert quantized.name == "SmolLM2-135M-Instruct"
    assert quantized.context_length == 8192
    assert "<|im_start|>" in (quantized.chat_template or "")


def test_float32_weights_give_the_same_greedy_tokens(
    quantized: LoadedModel, dense: LoadedModel
) -> None:
    assert dense.weights == "float32" and quantized.weights == "quantized"
    assert greedy(dense) == greedy(quantized)


def test_second_resolve_reuses_the_conversion(
    default_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(default_cache))
    conversions: list[Path] = []
    monkeypatch.setattr(resolve, "convert_gguf", lambda path, out, **_: conversions.append(path))
    folder = resolve_model("smollm2")
    assert folder.parent == default_cache / "vllm-mlx" / "models"
    assert conversions == []


def test_rebuilt_tokenizer_round_trips_and_keeps_specials_whole(
    quantized: LoadedModel, default_cache: Path
) -> None:
    tokenizer = quantized.tokenizer
    reader = gguf.GGUFReader(default_gguf(default_cache / "vllm-mlx"))
    tokens = reader.get_field("tokenizer.ggml.tokens").contents()
    token_types = reader.get_field("tokenizer.ggml.token_type").contents()
    specials = [
        (i, token)
        for i, (token, kind) in enumerate(zip(tokens, token_types, strict=True))
        if kind == 3
    ]
    assert len(specials) == 17
    for token_id, token in specials:
        assert tokenizer.encode(token, add_special_tokens=False) == [token_id]
    assert tokenizer.encode("Year 2025", add_special_tokens=False)[-4:] == [
        tokens.index(digit) for digit in "2025"
    ]
    for text in [
        "The capital of France is Paris.",
        "naïve café — 東京 🚀",
        "  indented\n\tcode(x=1)  ",
        "<|im_start|>user\nhi<|im_end|>",
    ]:
        assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text
