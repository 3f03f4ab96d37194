"""A random-weight model folder with the embedded model's tokenizer and chat template, sized
so its heads divide over 2 and 3 ranks (6 heads, 6 KV heads, 6 layers)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm.models import llama, qwen2

from vllm_mlx.models.resolve import resolve_model

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def write_tiny_folder(path: Path, *, arch: str = "llama", seed: int = 0) -> Path:
    """``llama`` (pipelined by vllm-mlx) or ``qwen2`` (mlx-lm's own pipeline)."""
    embedded = resolve_model(None, progress=False)
    path.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copy(embedded / name, path / name)
    vocab = json.loads((embedded / "config.json").read_text())["vocab_size"]
    config = {
        "model_type": arch,
        "hidden_size": 96,
        "num_hidden_layers": 6,
        "intermediate_size": 192,
        "num_attention_heads": 6,
        "num_key_value_heads": 6,
        "rms_norm_eps": 1e-5,
        "vocab_size": vocab,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "max_position_embeddings": 2048,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    family = llama if arch == "llama" else qwen2
    mx.random.seed(seed)
    model = family.Model(family.ModelArgs.from_dict(config))
    # a larger output head than the default init: peaked logits, so greedy choices are clear
    model.lm_head.weight = 4 * mx.random.normal(model.lm_head.weight.shape)
    mx.save_safetensors(str(path / "model.safetensors"), dict(tree_flatten(model.parameters())))
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return path
