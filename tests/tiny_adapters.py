"""Tiny base models on disk and adapters for them made with mlx-lm's own LoRA layers.

The base is a random-weight Llama folder (quantized to 4 bits, group 32, so the CPU path
routes it to the native fused blocks and one-node decode step, or kept float32); an adapter
is what ``mlx_lm.lora`` saves: ``linear_to_lora_layers`` on the loaded base, ``lora_b``
drawn at random (training would make it non-zero; zeros would change nothing), the
trainable parameters written to ``adapters.safetensors`` beside ``adapter_config.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.generate import generate_step
from mlx_lm.tuner.dora import DoRALinear
from mlx_lm.tuner.lora import LoRALinear
from mlx_lm.tuner.utils import linear_to_lora_layers
from mlx_lm.utils import load
from tiny_models import build_tiny_model, build_tiny_tokenizer, tiny_vocab_size

HIDDEN = 64
LAYERS = 2


def write_base(
    folder: Path, *, seed: int = 0, quantized: bool = True, hidden: int = HIDDEN
) -> Path:
    """A tiny Llama as an mlx-lm folder (config.json, model.safetensors, tokenizer)."""
    folder.mkdir(parents=True)
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(
        tokenizer, seed=seed, arch="llama", hidden_size=hidden, num_layers=LAYERS
    )
    config = {
        "model_type": "llama",
        "hidden_size": hidden,
        "num_hidden_layers": LAYERS,
        "intermediate_size": hidden * 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-6,
        "vocab_size": tiny_vocab_size(tokenizer),
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "max_position_embeddings": 4096,
    }
    if quantized:
        nn.quantize(model, group_size=32, bits=4)
        config["quantization"] = {"group_size": 32, "bits": 4}
    model.set_dtype(mx.float32)
    mx.eval(model.parameters())
    mx.save_safetensors(str(folder / "model.safetensors"), dict(tree_flatten(model.parameters())))
    tokenizer._tokenizer.save_pretrained(str(folder))
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def write_adapter(
    base: Path,
    folder: Path,
    *,
    seed: int,
    rank: int = 4,
    scale: float = 10.0,
    dora: bool = False,
    keys: list[str] | None = None,
    num_layers: int = LAYERS,
) -> Path:
    """An adapter of ``base`` as ``mlx_lm.lora`` saves one, with random non-zero lora_b."""
    model, _ = load(str(base))[:2]
    model.freeze()
    params: dict = {"rank": rank, "scale": scale, "dropout": 0.0}
    if keys is not None:
        params["keys"] = keys
    linear_to_lora_layers(model, num_layers, params, use_dora=dora)
    mx.random.seed(seed)
    for _, module in model.named_modules():
        if isinstance(module, LoRALinear | DoRALinear):
            module.lora_b = mx.random.normal(module.lora_b.shape) * 0.5
    mx.eval(model.parameters())
    folder.mkdir(parents=True)
    weights = dict(tree_flatten(model.trainable_parameters()))
    mx.save_safetensors(str(folder / "adapters.safetensors"), weights)
    config = {
        "fine_tune_type": "dora" if dora else "lora",
        "num_layers": num_layers,
        "lora_parameters": params,
        "model": str(base),
    }
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


PROMPT = [5, 9, 40, 77, 200, 259, 31, 7]
MAX_TOKENS = 12


def greedy(logprobs: mx.array) -> mx.array:
    return mx.argmax(logprobs, axis=-1)


def mlx_lm_tokens(base: Path, adapter: Path | None, prompt: list[int] = PROMPT) -> list[int]:
    """mlx-lm's greedy tokens with ``load(base, adapter_path=adapter)``."""
    model = load(str(base), adapter_path=str(adapter) if adapter else None)[0]
    steps = generate_step(mx.array(prompt), model, max_tokens=MAX_TOKENS, sampler=greedy)
    return [int(token) for token, _ in steps]


@dataclass
class Fleet:
    base: Path
    lora: Path
    dora: Path
    last: Path  # LoRA on the last layer only: the first block stays fused beside it
    expected: dict[str | None, list[int]]  # adapter name (None: base) -> mlx-lm's tokens


def make_fleet(root: Path, quantized: bool) -> Fleet:
    base = write_base(root / "base", quantized=quantized)
    lora = write_adapter(base, root / "lora", seed=1)
    dora = write_adapter(
        base, root / "dora", seed=2, dora=True, keys=["self_attn.q_proj", "mlp.down_proj"]
    )
    last = write_adapter(base, root / "last", seed=4, num_layers=1)
    expected = {None: mlx_lm_tokens(base, None)}
    for name, folder in (("lora", lora), ("dora", dora), ("last", last)):
        expected[name] = mlx_lm_tokens(base, folder)
    return Fleet(base, lora, dora, last, expected)
