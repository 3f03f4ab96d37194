"""Tiny random-weight vision-language models, written to folders mlx-vlm loads offline.

Each folder holds what a real checkpoint holds: ``config.json``, ``model.safetensors`` (the
weights of mlx-vlm's own model class, random), a byte-level BPE ``tokenizer.json`` with the
family's image tokens, a chat template of our own that writes image parts the way the
family's real template does (both from tiny_vision_tokenizers.py), and the processor
files (``preprocessor_config.json``, ``processor_config.json``) that make mlx-vlm build its
real processor without a hub.

Public API:
    write_tiny_vlm(folder, family) -> Path   (family: one of FAMILIES)
    tiny_vlm(family) -> Path                 (written once per process)
    png_data_url(color, size), encoded(color, size, format), bomb_png(width, height)
    FAMILIES
"""

from __future__ import annotations

import base64
import functools
import io
import json
import struct
import tempfile
import zlib
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten
from PIL import Image
from tiny_vision_tokenizers import vision_tokenizer
from transformers import PreTrainedTokenizerFast

FAMILIES = ("qwen2_5_vl", "qwen3_vl", "idefics3", "gemma3", "llava", "mistral3")


def _qwen_config(tok: PreTrainedTokenizerFast) -> dict:
    ids = tok.convert_tokens_to_ids
    return {
        "model_type": "qwen2_5_vl",
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-6,
        "vocab_size": len(tok),
        "max_position_embeddings": 4096,
        "rope_theta": 10000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
        "tie_word_embeddings": True,
        "image_token_id": ids("<|image_pad|>"),
        "video_token_id": ids("<|video_pad|>"),
        "vision_start_token_id": ids("<|vision_start|>"),
        "vision_end_token_id": ids("<|vision_end|>"),
        "eos_token_id": [ids("<|im_end|>")],
        "vision_config": {
            "model_type": "qwen2_5_vl",
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "out_hidden_size": 64,
            "num_heads": 2,
            "patch_size": 14,
            "spatial_patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 56,
            "fullatt_block_indexes": [1],
            "in_chans": 3,
        },
    }


def _qwen3_config(tok: PreTrainedTokenizerFast) -> dict:
    """Qwen3-VL: M-RoPE text model in ``text_config``, a vision tower whose ``deepstack``
    layers add image features to the first decoder layers' hidden states."""
    ids = tok.convert_tokens_to_ids
    return {
        "model_type": "qwen3_vl",
        "architectures": ["Qwen3VLForConditionalGeneration"],
        "image_token_id": ids("<|image_pad|>"),
        "video_token_id": ids("<|video_pad|>"),
        "vision_start_token_id": ids("<|vision_start|>"),
        "vision_end_token_id": ids("<|vision_end|>"),
        "eos_token_id": [ids("<|im_end|>")],
        "tie_word_embeddings": True,
        "text_config": {
            "model_type": "qwen3_vl",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "rms_norm_eps": 1e-6,
            "vocab_size": len(tok),
            "max_position_embeddings": 4096,
            "rope_theta": 10000.0,
            "rope_scaling": {"rope_type": "default", "mrope_section": [2, 3, 3]},
            "tie_word_embeddings": True,
        },
        "vision_config": {
            "model_type": "qwen3_vl",
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "out_hidden_size": 64,
            "num_heads": 2,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "num_position_embeddings": 64,
            "deepstack_visual_indexes": [0],
            "in_channels": 3,
        },
    }


def _gemma3_config(tok: PreTrainedTokenizerFast) -> dict:
    """Gemma 3: a SigLIP tower pooled to ``mm_tokens_per_image`` soft tokens, a text model
    whose local layers keep a sliding window (rotating caches) between global ones."""
    ids = tok.convert_tokens_to_ids
    return {
        "model_type": "gemma3",
        "architectures": ["Gemma3ForConditionalGeneration"],
        "image_token_index": ids("<image_soft_token>"),
        "hidden_size": 64,
        "pad_token_id": ids("<pad>"),
        "eos_token_id": [ids("<end_of_turn>")],
        "text_config": {
            "model_type": "gemma3_text",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "query_pre_attn_scalar": 16,
            "rms_norm_eps": 1e-6,
            "vocab_size": len(tok),
            "sliding_window": 512,
            "sliding_window_pattern": 2,
            "mm_tokens_per_image": 4,
            "max_position_embeddings": 4096,
        },
        "vision_config": {
            "model_type": "siglip_vision_model",
            "num_hidden_layers": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_attention_heads": 2,
            "patch_size": 16,
            "image_size": 64,
        },
    }


def _llava_config(tok: PreTrainedTokenizerFast) -> dict:
    """LLaVA: a CLIP tower (its class token dropped) and a two-layer projector into a Llama
    text model; one image is (32 / 16)^2 = 4 patch features."""
    ids = tok.convert_tokens_to_ids
    return {
        "model_type": "llava",
        "architectures": ["LlavaForConditionalGeneration"],
        "image_token_index": ids("<image>"),
        "vision_feature_layer": -2,
        "vision_feature_select_strategy": "default",
        "eos_token_id": [ids("</s>")],
        "text_config": {
            "model_type": "llama",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "rms_norm_eps": 1e-6,
            "vocab_size": len(tok),
            "max_position_embeddings": 4096,
            "rope_theta": 10000.0,
        },
        "vision_config": {
            "model_type": "clip_vision_model",
            "num_hidden_layers": 3,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 16,
            "projection_dim": 32,
        },
    }


def _mistral3_config(tok: PreTrainedTokenizerFast) -> dict:
    """Mistral Small 3.x: a Pixtral tower (2-D rotary patches), its features merged 2 x 2
    by a learned patch merger, a Mistral text model; a 32 x 32 image is 4 patch rows of 4
    patches of 8 pixels, merged to 2 rows of 2 image tokens."""
    ids = tok.convert_tokens_to_ids
    return {
        "model_type": "mistral3",
        "architectures": ["Mistral3ForConditionalGeneration"],
        "image_token_index": ids("[IMG]"),
        "spatial_merge_size": 2,
        "vision_feature_layer": -1,
        "multimodal_projector_bias": False,
        "eos_token_id": [ids("</s>")],
        "text_config": {
            "model_type": "mistral",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "rms_norm_eps": 1e-5,
            "vocab_size": len(tok),
            "max_position_embeddings": 4096,
            "rope_theta": 1000000.0,
        },
        "vision_config": {
            "model_type": "pixtral",
            "num_hidden_layers": 2,
            "hidden_size": 32,
            "head_dim": 16,
            "intermediate_size": 64,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 8,
            "rope_theta": 10000.0,
        },
    }


def _idefics_config(tok: PreTrainedTokenizerFast) -> dict:
    ids = tok.convert_tokens_to_ids
    return {
        "model_type": "idefics3",
        "architectures": ["Idefics3ForConditionalGeneration"],
        "image_token_id": ids("<image>"),
        "scale_factor": 2,
        "eos_token_id": [ids("<end_of_utterance>")],
        "text_config": {
            "model_type": "llama",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "num_attention_heads": 2,  # head_dim 32: --kv-bits groups of 32 fit
            "num_key_value_heads": 1,
            "rms_norm_eps": 1e-6,
            "vocab_size": len(tok),
            "max_position_embeddings": 4096,
            "rope_theta": 10000.0,
            "tie_word_embeddings": True,
        },
        "vision_config": {
            "model_type": "idefics3",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": 64,
            "patch_size": 16,
            "num_channels": 3,
            "layer_norm_eps": 1e-6,
        },
    }


# Per-channel statistics the families' image processors normalize with (CLIP's; 0.5).
CLIP_STATS = {
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
}
HALF_STATS = {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}


def _normalized(stats: dict) -> dict:
    """Pixels rescaled to [0, 1], then normalized with ``stats``."""
    return {"do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True, **stats}


def _processor_files(family: str) -> tuple[dict, dict]:
    """(preprocessor_config.json, processor_config.json) for the family's real processor."""
    if family == "llava":
        pre = {
            "image_processor_type": "CLIPImageProcessor",
            "processor_class": "LlavaProcessor",
            "size": {"shortest_edge": 32},
            "crop_size": {"height": 32, "width": 32},
            "do_resize": True,
            "do_center_crop": True,
            **_normalized(CLIP_STATS),
        }
        proc = {
            "processor_class": "LlavaProcessor",
            "patch_size": 16,
            "vision_feature_select_strategy": "default",
            "num_additional_image_tokens": 1,
        }
        return pre, proc
    if family == "mistral3":
        pre = {
            "image_processor_type": "PixtralImageProcessor",
            "processor_class": "PixtralProcessor",
            "size": {"longest_edge": 32},
            "patch_size": {"height": 8, "width": 8},
            "do_resize": True,
            **_normalized(CLIP_STATS),
        }
        proc = {
            "processor_class": "PixtralProcessor",
            "patch_size": 8,
            "spatial_merge_size": 2,
            "image_token": "[IMG]",
            "image_break_token": "[IMG_BREAK]",
            "image_end_token": "[IMG_END]",
        }
        return pre, proc
    if family == "gemma3":
        pre = {
            "image_processor_type": "Gemma3ImageProcessor",
            "processor_class": "Gemma3Processor",
            "size": {"height": 64, "width": 64},
            "do_resize": True,
            **_normalized(HALF_STATS),
            "do_pan_and_scan": False,
        }
        # (64 / 16)^2 patches pooled to 2 x 2: 4 soft tokens per image
        return pre, {"processor_class": "Gemma3Processor", "image_seq_length": 4}
    if family == "qwen3_vl":
        pre = {
            "image_processor_type": "Qwen3VLImageProcessor",
            "processor_class": "Qwen3VLProcessor",
            "patch_size": 16,
            "temporal_patch_size": 2,
            "merge_size": 2,
            "min_pixels": 64 * 64,
            "max_pixels": 128 * 128,
            **HALF_STATS,
        }
        return pre, {"processor_class": "Qwen3VLProcessor"}
    if family == "qwen2_5_vl":
        pre = {
            "image_processor_type": "Qwen2VLImageProcessor",
            "processor_class": "Qwen2_5_VLProcessor",
            "patch_size": 14,
            "temporal_patch_size": 2,
            "merge_size": 2,
            "min_pixels": 56 * 56,
            "max_pixels": 112 * 112,
            **CLIP_STATS,
        }
        return pre, {"processor_class": "Qwen2_5_VLProcessor"}
    pre = {
        "image_processor_type": "Idefics3ImageProcessor",
        "processor_class": "Idefics3Processor",
        "do_resize": True,
        "size": {"longest_edge": 128},
        "do_image_splitting": True,
        "max_image_size": {"longest_edge": 64},
        **_normalized(HALF_STATS),
        "do_pad": True,
    }
    # (64 / 16)^2 patches, merged by scale_factor^2 = 4: 4 image tokens per tile
    return pre, {"processor_class": "Idefics3Processor", "image_seq_len": 4}


def _model(config: dict):
    """mlx-vlm's own model class for ``config``, built the way its loader builds it."""
    from mlx_vlm.utils import get_model_and_args, update_module_configs

    config = json.loads(json.dumps(config))
    module, _ = get_model_and_args(config)
    model_config = module.ModelConfig.from_dict(config)
    model_config = update_module_configs(model_config, module, config, ["text", "vision"])
    return module.Model(model_config)


def write_tiny_vlm(folder: Path, family: str, seed: int = 0, sizes: dict | None = None) -> Path:
    """Write a tiny ``family`` model to ``folder`` (created); returns the folder.

    ``sizes`` (Qwen2.5-VL only; the benchmark's larger shapes) replaces text config keys,
    ``vision`` keys of the vision config and ``max_pixels`` of the image processor."""
    folder.mkdir(parents=True, exist_ok=True)
    tok = vision_tokenizer(family)
    tok.save_pretrained(str(folder))
    config = {
        "qwen2_5_vl": _qwen_config,
        "qwen3_vl": _qwen3_config,
        "idefics3": _idefics_config,
        "gemma3": _gemma3_config,
        "llava": _llava_config,
        "mistral3": _mistral3_config,
    }[family](tok)
    pre, proc = _processor_files(family)
    sizes = dict(sizes or {})
    config["vision_config"].update(sizes.pop("vision", {}))
    if "max_pixels" in sizes:
        pre["max_pixels"] = sizes.pop("max_pixels")
    config.update(sizes)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    (folder / "preprocessor_config.json").write_text(json.dumps(pre, indent=1))
    (folder / "processor_config.json").write_text(json.dumps(proc, indent=1))
    if family == "qwen3_vl":  # its video processor's own file (else it asks the hub)
        (folder / "video_preprocessor_config.json").write_text(json.dumps(pre, indent=1))
    (folder / "chat_template.json").write_text(json.dumps({"chat_template": tok.chat_template}))
    mx.random.seed(seed)
    model = _model(config)
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "mlx"})
    return folder


@functools.cache
def tiny_vlm(family: str) -> Path:
    """A tiny ``family`` model folder written once per test process."""
    return write_tiny_vlm(Path(tempfile.mkdtemp(prefix=f"tiny-{family}-")), family)


def png_data_url(color: tuple[int, int, int], size: tuple[int, int] = (64, 48)) -> str:
    """A solid-colour PNG as a data URL."""
    return "data:image/png;base64," + base64.b64encode(encoded(color, size, "PNG")).decode()


def encoded(color: tuple[int, int, int], size: tuple[int, int], fmt: str, **save) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, fmt, **save)
    return buffer.getvalue()


def bomb_png(width: int, height: int) -> bytes:
    """A PNG whose header declares ``width`` x ``height`` with almost no data behind it."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + chunk(b"IEND", b"")
    )
