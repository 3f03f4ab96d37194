"""Random-weight checkpoints that carry a multi-token-prediction head, under the released
checkpoints' tensor names, with the embedded model's tokenizer.

``glm4_moe`` (GLM-4.5's layout, which DeepSeek-V3's shares: ``model.layers.{N}.enorm``,
``hnorm``, ``eh_proj``, ``shared_head.{norm,head}``, ``embed_tokens`` and a MoE decoder
layer whose experts are stored one by one, ``mlp.experts.{e}.gate_proj.weight``) and
``mimo`` (``model.mtp_layers.0.{hidden,token}_layernorm``, ``input_proj``, a Qwen2-style
block, ``final_layernorm``). The main model's tensors are mlx-lm's own classes' parameters;
the head's are those of the family's decoder layer built as layer N, renamed as released.
``reference_model`` builds the same family with one more layer holding the head's block,
loaded through mlx-lm's own ``sanitize``, so a test can check the head against it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm.models import glm4_moe, mimo

from vllm_mlx.models.resolve import resolve_model

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
FAMILIES = {"glm4_moe": glm4_moe, "mimo": mimo}


def config_of(arch: str, vocab: int) -> dict[str, Any]:
    common = {
        "model_type": arch,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "intermediate_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "vocab_size": vocab,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "max_position_embeddings": 2048,
        "num_nextn_predict_layers": 1,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    if arch == "mimo":
        return common
    return common | {
        "moe_intermediate_size": 16,
        "norm_topk_prob": True,
        "n_group": 1,
        "head_dim": 8,
        "topk_group": 1,
        "n_shared_experts": 1,
        "n_routed_experts": 4,
        "routed_scaling_factor": 1.0,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": 1,
        "rope_scaling": None,
        "use_qk_norm": False,
        "attention_bias": True,
        "partial_rotary_factor": 0.5,
    }


def write_mtp_folder(path: Path, arch: str, *, seed: int = 0, with_head: bool = True) -> Path:
    """A checkpoint folder of ``arch`` (``glm4_moe`` or ``mimo``); ``with_head=False``: the
    same main model without its MTP tensors (what mlx-lm's conversion leaves)."""
    embedded = resolve_model(None, progress=False)
    path.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copy(embedded / name, path / name)
    vocab = json.loads((embedded / "config.json").read_text())["vocab_size"]
    config = config_of(arch, vocab)
    family = FAMILIES[arch]
    args = family.ModelArgs.from_dict(config)
    mx.random.seed(seed)
    model = family.Model(args)
    # a larger output head than the default init: peaked logits, so greedy choices are clear
    model.lm_head.weight = 4 * mx.random.normal(model.lm_head.weight.shape)
    weights = _released(dict(tree_flatten(model.parameters())), "model.layers.")
    if with_head:
        weights |= head_tensors(arch, args, config)
    mx.save_safetensors(str(path / "model.safetensors"), weights)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return path


def head_tensors(arch: str, args: Any, config: dict[str, Any]) -> dict[str, mx.array]:
    dims, vocab, n = args.hidden_size, args.vocab_size, args.num_hidden_layers
    rand = lambda *shape: 0.5 * mx.random.normal(shape)  # noqa: E731
    norm = lambda: 1 + 0.1 * mx.random.normal((dims,))  # noqa: E731
    if arch == "mimo":
        block = mimo.TransformerBlock(args)
        prefix = "model.mtp_layers.0."
        own = {
            "hidden_layernorm.weight": norm(),
            "token_layernorm.weight": norm(),
            "input_proj.weight": rand(dims, 2 * dims),
            "final_layernorm.weight": norm(),
        }
    else:
        block = glm4_moe.DecoderLayer(args, n)
        block.mlp.gate.e_score_correction_bias = 0.1 * mx.random.normal((args.n_routed_experts,))
        prefix = f"model.layers.{n}."
        own = {
            "enorm.weight": norm(),
            "hnorm.weight": norm(),
            "eh_proj.weight": rand(dims, 2 * dims),
            "shared_head.norm.weight": norm(),
            "shared_head.head.weight": 4 * mx.random.normal((vocab, dims)),
            "embed_tokens.weight": mx.random.normal((vocab, dims)),
        }
    for name, value in tree_flatten(block.parameters()):
        if name.endswith("norm.weight"):
            value = value + 0.1 * mx.random.normal(value.shape)
        own[name] = value
    return _released({prefix + k: v for k, v in own.items()}, prefix)


def _released(weights: dict[str, mx.array], prefix: str) -> dict[str, mx.array]:
    """mlx-lm's stacked experts (``switch_mlp``) stored one by one, as released."""
    out = {}
    for name, value in weights.items():
        if ".mlp.switch_mlp." in name:
            for e in range(value.shape[0]):
                out[name.replace(".switch_mlp.", f".experts.{e}.")] = value[e]
        else:
            out[name] = value
    return out


def reference_model(path: Path) -> Any:
    """The family's model with one more layer, the head's block as its last (loaded through
    mlx-lm's own ``sanitize``), for checking the head against."""
    config = json.loads((path / "config.json").read_text())
    arch, n = config["model_type"], config["num_hidden_layers"]
    family = FAMILIES[arch]
    model = family.Model(family.ModelArgs.from_dict(config | {"num_hidden_layers": n + 1}))
    raw = mx.load(str(path / "model.safetensors"))
    assert isinstance(raw, dict)
    prefix = "model.mtp_layers.0." if arch == "mimo" else f"model.layers.{n}."
    weights = {}
    for name, value in raw.items():
        if name.startswith(prefix):
            local = name[len(prefix) :]
            if local.startswith(("self_attn.", "mlp.", "input_layernorm", "post_attention")):
                weights[f"model.layers.{n}.{local}"] = value
        else:
            weights[name] = value
    model.load_weights(list(model.sanitize(weights).items()), strict=True)
    mx.eval(model.parameters())
    return model
