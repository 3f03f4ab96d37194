"""The tokenizers and chat templates of the tiny vision-language models (tiny_vision.py):
a byte-level BPE trained on a small corpus, with each family's special and image tokens,
and a chat template of our own that writes image parts the way the family's real template
does.

Public API:
    vision_tokenizer(family) -> PreTrainedTokenizerFast   (family: one of tiny_vision.FAMILIES)
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

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


def vision_tokenizer(family: str) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with ``family``'s special and image tokens, its end of
    turn and its chat template."""
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
