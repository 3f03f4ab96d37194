"""A models directory for the fleet tests: two tiny random-weight models on disk (an mlx-lm
folder with think/tool tokens and a Qwen3-style template, and a llama GGUF with a ChatML
template), plus the embedded model by ``path = "default"`` in ``models.toml``."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten
from tiny_gguf import write_tiny_gguf
from tiny_models import build_tiny_model, build_tiny_tokenizer, tiny_vocab_size

HIDDEN = 32


def write_tiny_folder(folder: Path, *, seed: int = 0, chat_template: str | None = None) -> Path:
    """A tiny qwen3 model as an mlx-lm folder: config.json, model.safetensors, tokenizer."""
    folder.mkdir(parents=True)
    tokenizer = (
        build_tiny_tokenizer(chat_template=chat_template)
        if chat_template
        else build_tiny_tokenizer()
    )
    model = build_tiny_model(tokenizer, seed=seed, hidden_size=HIDDEN)
    mx.save_safetensors(str(folder / "model.safetensors"), dict(tree_flatten(model.parameters())))
    tokenizer._tokenizer.save_pretrained(str(folder))
    config = {
        "model_type": "qwen3",
        "hidden_size": HIDDEN,
        "num_hidden_layers": 2,
        "intermediate_size": HIDDEN * 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": HIDDEN // 4,
        "rms_norm_eps": 1e-6,
        "vocab_size": tiny_vocab_size(tokenizer),
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "max_position_embeddings": 4096,
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def write_models_dir(root: Path, toml: str = "") -> Path:
    """``root/models`` with ``coder/`` (tiny qwen3), ``small.gguf`` (tiny llama) and a
    ``models.toml`` holding ``toml``."""
    folder = root / "models"
    write_tiny_folder(folder / "coder")
    folder.mkdir(exist_ok=True)
    write_tiny_gguf(folder / "small.gguf", seed=1)
    if toml:
        (folder / "models.toml").write_text(toml)
    return folder
