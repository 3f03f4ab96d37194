"""Tiny random-weight vision-language models, written to folders mlx-vlm loads offline.

Each folder holds what a real checkpoint holds: ``config.json``, ``model.safetensors`` (the
weights of mlx-vlm's own model class, random), a byte-level BPE ``tokenizer.json`` with the
family's image tokens, a chat template of our own that writes image parts the way the
family's real template does, and the processor files (``preprocessor_config.json``,
``processor_config.json``) that make mlx-vlm build its real processor without a hub.

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
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

FAMILIES = ("qwen2_5_vl", "qwen3_vl", "idefics3", "gemma3", "llava", "mistral3")
_QWEN = ("qwen2_5_vl", "qwen3_vl")

_CORPUS = (
    "The picture shows a red square on a white background. What is in this image?",
    "Describe the screenshot: a terminal window with green text and a blinking cursor.",
    '{"name": "read_file", "arguments": {"path": "screenshot.png"}}',
    "Hello, world! How are you today? I am fine, thank you. 0123456789",
)

# Qwen2.5-VL writes an image part as vision_start, one image pad, vision_end (the processor
# expands the pad to the image's patch count); tools as Hermes <tool_call> JSON.
_QWEN_TEMPLATE = (
    "{%- macro show(content) -%}{%- if content is string -%}{{ content }}"
    "{%- else -%}{%- for part in content -%}"
    "{%- if part.type == 'image' or part.type == 'image_url' -%}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif part.type == 'text' -%}{{ part.text }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}{%- endmacro -%}"
    "{%- if tools -%}<|im_start|>system\n# Tools\n<tools>"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools>\n"
    "Call a function as <tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'tool' -%}<|im_start|>user\n<tool_response>\n"
    "{{ show(message.content) }}\n</tool_response><|im_end|>\n"
    "{%- elif message.role == 'assistant' -%}<|im_start|>assistant\n"
    "{{ show(message.content or '') }}"
    "{%- for tc in message.tool_calls or [] -%}"
    '\n<tool_call>\n{"name": "{{ tc.function.name }}", "arguments": '
    "{{ tc.function.arguments }}}\n</tool_call>{%- endfor -%}<|im_end|>\n"
    "{%- else -%}<|im_start|>{{ message.role }}\n{{ show(message.content) }}<|im_end|>\n"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}"
)

# Idefics3 / SmolVLM: "User:<image>text<end_of_utterance>\nAssistant:"; the processor
# expands <image> into the global image (and tiles) between fake tokens.
_IDEFICS_TEMPLATE = (
    "<|im_start|>"
    "{%- for message in messages -%}"
    "{{ message.role | capitalize }}"
    "{%- if message.content is string -%}: {{ message.content }}"
    "{%- else -%}{%- if message.content[0].type == 'image' -%}:{%- else -%}: {%- endif -%}"
    "{%- for part in message.content -%}"
    "{%- if part.type == 'image' -%}<image>{%- elif part.type == 'text' -%}{{ part.text }}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}<end_of_utterance>\n"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}Assistant:{%- endif -%}"
)

_QWEN_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
]

# Gemma 3: "<start_of_turn>user\n…<end_of_turn>\n", an image part as <start_of_image> (the
# processor writes the image's soft tokens between it and <end_of_image>); the assistant is
# "model"; tool results are read as user turns here (Gemma 3's template has no tool role).
_GEMMA_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages -%}"
    "{%- set role = 'model' if message.role == 'assistant' else 'user' -%}"
    "<start_of_turn>{{ role }}{{ '\\n' }}"
    "{%- if message.content is string -%}{{ message.content }}"
    "{%- else -%}{%- for part in message.content -%}"
    "{%- if part.type == 'image' -%}<start_of_image>"
    "{%- elif part.type == 'text' -%}{{ part.text }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}<end_of_turn>{{ '\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<start_of_turn>model{{ '\\n' }}{%- endif -%}"
)

# LLaVA-1.5: "USER: <image>\ntext ASSISTANT: answer</s>"; the processor repeats <image> once
# per patch feature.
_LLAVA_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'assistant' -%}ASSISTANT: {% else -%}USER: {% endif -%}"
    "{%- if message.content is string -%}{{ message.content }}"
    "{%- else -%}{%- for part in message.content -%}"
    "{%- if part.type == 'image' -%}<image>{{ '\\n' }}"
    "{%- elif part.type == 'text' -%}{{ part.text }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- if message.role == 'assistant' -%}</s>{%- endif -%}{{ ' ' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}ASSISTANT:{%- endif -%}"
)

# Mistral Small 3.x: "<s>[INST]…[/INST]answer</s>", an image part as [IMG] (the processor
# writes the image's patch rows of [IMG], each but the last ended by [IMG_BREAK], then
# [IMG_END]); system turns as [SYSTEM_PROMPT]…[/SYSTEM_PROMPT]; tool results as user turns.
_MISTRAL_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'system' -%}[SYSTEM_PROMPT]"
    "{%- elif message.role != 'assistant' -%}[INST]{%- endif -%}"
    "{%- if message.content is string -%}{{ message.content }}"
    "{%- else -%}{%- for part in message.content or [] -%}"
    "{%- if part.type == 'image' -%}[IMG]"
    "{%- elif part.type == 'text' -%}{{ part.text }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- if message.role == 'system' -%}[/SYSTEM_PROMPT]"
    "{%- elif message.role == 'assistant' -%}</s>{%- else -%}[/INST]{%- endif -%}"
    "{%- endfor -%}"
)

_TEMPLATES = {
    "mistral3": _MISTRAL_TEMPLATE,
    "llava": _LLAVA_TEMPLATE,
    "qwen2_5_vl": _QWEN_TEMPLATE,
    "qwen3_vl": _QWEN_TEMPLATE,
    "idefics3": _IDEFICS_TEMPLATE,
    "gemma3": _GEMMA_TEMPLATE,
}
_EOS = {
    "mistral3": "</s>",
    "llava": "</s>",
    "qwen2_5_vl": "<|im_end|>",
    "qwen3_vl": "<|im_end|>",
    "idefics3": "<end_of_utterance>",
    "gemma3": "<end_of_turn>",
}

_SPECIALS = {
    "qwen2_5_vl": _QWEN_SPECIALS,
    "qwen3_vl": _QWEN_SPECIALS,
    "idefics3": [
        "<|endoftext|>",
        "<|im_start|>",
        "<end_of_utterance>",
        "<fake_token_around_image>",
        "<image>",
        "<global-img>",
        *[f"<row_{r}_col_{c}>" for r in range(1, 4) for c in range(1, 4)],
    ],
    "llava": ["<pad>", "<s>", "</s>", "<image>"],
    "mistral3": [
        "<pad>",
        "<s>",
        "</s>",
        "[INST]",
        "[/INST]",
        "[SYSTEM_PROMPT]",
        "[/SYSTEM_PROMPT]",
        "[IMG]",
        "[IMG_BREAK]",
        "[IMG_END]",
    ],
    "gemma3": [
        "<pad>",
        "<eos>",
        "<bos>",
        "<start_of_turn>",
        "<end_of_turn>",
        "<start_of_image>",
        "<end_of_image>",
        "<image_soft_token>",
    ],
}


def _tokenizer(family: str) -> PreTrainedTokenizerFast:
    specials = _SPECIALS[family]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(list(_CORPUS) * 4, trainer=trainer)
    extra: dict = {"pad_token": "<|endoftext|>"}
    if family in ("llava", "mistral3"):
        extra = {"pad_token": "<pad>", "bos_token": "<s>"}
    if family == "gemma3":  # the processor reads its image tokens off the tokenizer
        extra = {
            "pad_token": "<pad>",
            "bos_token": "<bos>",
            "extra_special_tokens": {
                "boi_token": "<start_of_image>",
                "eoi_token": "<end_of_image>",
                "image_token": "<image_soft_token>",
            },
        }
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token=_EOS[family], chat_template=_TEMPLATES[family], **extra
    )


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
    tok = _tokenizer(family)
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
