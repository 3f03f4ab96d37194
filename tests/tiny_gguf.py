"""Helpers for the model tests: a tiny random llama or qwen2 written as a llama.cpp GGUF.

The GGUF uses llama.cpp's tensor names, its Q/K row permutation and real Q4_0/Q8_0 encodings
(from the ``gguf`` package), so converting it exercises the same paths as a downloaded file.
``write_tiny_gguf`` returns the source mlx-lm model loaded with the exact values the GGUF
stores (dequantized where quantized), so converted and source logits must agree.
"""

from __future__ import annotations

import math
from pathlib import Path

import gguf
import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten
from mlx_lm.models import llama, qwen2
from tokenizers import pre_tokenizers

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TINY_ARGS = dict(
    hidden_size=64,
    num_hidden_layers=2,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    max_position_embeddings=256,
)
_GGUF_NAMES = {
    "model.embed_tokens": "token_embd",
    "model.norm": "output_norm",
    "lm_head": "output",
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def tiny_vocab() -> tuple[list[str], list[str], list[int]]:
    """Tokens, merges and llama.cpp token types (3 = control) of a tiny byte-level BPE."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    merged = [merge.replace(" ", "") for merge in MERGES]
    tokens = SPECIAL_TOKENS + alphabet + merged
    types = [3] * len(SPECIAL_TOKENS) + [1] * (len(alphabet) + len(merged))
    return tokens, MERGES, types


def gguf_name(mlx_name: str) -> str:
    """llama.cpp's name for an mlx-lm llama parameter, e.g. blk.0.attn_q.weight."""
    module, _, parameter = mlx_name.rpartition(".")
    if module in _GGUF_NAMES:
        return f"{_GGUF_NAMES[module]}.{parameter}"
    _, _, layer, rest = module.split(".", 3)
    return f"blk.{layer}.{_GGUF_NAMES[rest]}.{parameter}"


def permute_rope_rows(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf ``permute`` (HF layout -> GGUF layout)."""
    return (
        weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def write_tiny_gguf(
    path: Path,
    *,
    seed: int = 0,
    tied: bool = True,
    tensor_types: dict[str, str] | None = None,
    architecture: str = "llama",
    pre_tokenizer: str = "smollm",
    raw_tensor_types: dict[str, str] | None = None,
    rope_scaling: dict | None = None,
    rope_freqs: list[float] | None = None,
) -> nn.Module:
    """Write a tiny GGUF at ``path`` and return the float32 source model it encodes.

    ``architecture`` ``qwen2`` writes a Qwen2 model (Q/K/V biases, no Q/K permutation); any
    other name writes a llama model under that architecture name.

    ``tensor_types`` maps a GGUF base name (``token_embd``, ``ffn_down``…) to ``Q4_0``/``Q8_0``;
    ``raw_tensor_types`` stores random bytes of any GGML type (for unsupported-type tests).
    ``rope_scaling`` configures the source model; ``rope_freqs`` is written as llama.cpp's
    ``rope_freqs.weight`` tensor.
    """
    tensor_types = tensor_types or {}
    raw_tensor_types = raw_tensor_types or {}
    tokens, merges, types = tiny_vocab()
    mx.random.seed(seed)
    family = qwen2 if architecture == "qwen2" else llama
    model = family.Model(
        family.ModelArgs(
            model_type=family.__name__.rsplit(".", 1)[-1],
            vocab_size=len(tokens),
            tie_word_embeddings=tied,
            rope_scaling=rope_scaling,
            **TINY_ARGS,
        )
    )
    model.set_dtype(mx.float32)
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_context_length(TINY_ARGS["max_position_embeddings"])
    writer.add_embedding_length(TINY_ARGS["hidden_size"])
    writer.add_block_count(TINY_ARGS["num_hidden_layers"])
    writer.add_feed_forward_length(TINY_ARGS["intermediate_size"])
    writer.add_head_count(TINY_ARGS["num_attention_heads"])
    writer.add_head_count_kv(TINY_ARGS["num_key_value_heads"])
    writer.add_layer_norm_rms_eps(TINY_ARGS["rms_norm_eps"])
    writer.add_rope_freq_base(TINY_ARGS["rope_theta"])
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre_tokenizer)
    writer.add_token_list(tokens)
    writer.add_token_merges(merges)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)
    if rope_freqs is not None:
        writer.add_tensor("rope_freqs.weight", np.array(rope_freqs, dtype=np.float32))

    effective: list[tuple[str, mx.array]] = []
    for name, value in tree_flatten(model.parameters()):
        array = np.array(value, dtype=np.float32)
        if array.ndim == 1:
            array = np.ones_like(array) + 0.1 * rng.standard_normal(array.shape).astype(np.float32)
        else:
            array = 0.2 * rng.standard_normal(array.shape).astype(np.float32)
        target = gguf_name(name)
        base = target.rsplit(".", 2)[-2]
        stored = array
        if base in ("attn_q", "attn_k") and family is llama:
            heads = TINY_ARGS["num_attention_heads" if base == "attn_q" else "num_key_value_heads"]
            stored = permute_rope_rows(array, heads)
        if array.ndim == 1:  # llama.cpp stores norms and biases as F32
            writer.add_tensor(target, stored)
        elif base in raw_tensor_types:
            kind = gguf.GGMLQuantizationType[raw_tensor_types[base]]
            block, type_size = gguf.GGML_QUANT_SIZES[kind]
            byte_shape = (stored.shape[0], max(1, stored.shape[1] // block) * type_size)
            raw = rng.integers(0, 255, size=byte_shape, dtype=np.uint8)
            writer.add_tensor(target, raw, raw_dtype=kind)
        elif base in tensor_types:
            kind = gguf.GGMLQuantizationType[tensor_types[base]]
            packed = gguf.quants.quantize(stored, kind)
            writer.add_tensor(target, packed, raw_dtype=kind)
            # The model must hold what the file holds: dequantize, then undo the permutation
            # by dequantizing the unpermuted array's quantization (rows quantize independently).
            array = gguf.quants.dequantize(gguf.quants.quantize(array, kind), kind)
        else:
            writer.add_tensor(target, stored)
        effective.append((name, mx.array(array)))
    model.load_weights(effective)
    mx.eval(model.parameters())

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model


def llama_cpp_rope_factors(scaling: dict, head_dim: int, base: float) -> list[float]:
    """``rope_freqs`` as llama.cpp's convert_hf_to_gguf computes them for Llama 3 scaling."""
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_context = scaling["original_max_position_embeddings"]
    factors = []
    for index in range(0, head_dim, 2):
        wavelen = 2 * math.pi * base ** (index / head_dim)
        if wavelen < old_context / high:
            factors.append(1.0)
        elif wavelen > old_context / low:
            factors.append(factor)
        else:
            smooth = (old_context / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return factors
