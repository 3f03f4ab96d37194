"""Tiny random-weight mlx-lm models and a matching tokenizer, for fast tests.

Tests need a real model and tokenizer (mlx-lm classes, a byte-level BPE, special tokens for
reasoning and tool calls, a Qwen3-style chat template) without ever touching a model hub, and
fast enough that a test can decode hundreds of tokens on a CPU. Everything here is built in
memory, deterministically, in well under a second.

Public API:
    build_tiny_tokenizer() -> mlx_lm TokenizerWrapper  (cached; do not mutate)
    build_tiny_model(tokenizer, seed=0, arch="qwen3"|"qwen2"|"llama") -> mlx.nn.Module
    SPECIAL_TOKENS, QWEN3_STYLE_CHAT_TEMPLATE
"""

from __future__ import annotations

import functools

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.tokenizer_utils import TokenizerWrapper
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
THINK_START = "<think>"
THINK_END = "</think>"
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
SPECIAL_TOKENS = (
    ENDOFTEXT,
    IM_START,
    IM_END,
    THINK_START,
    THINK_END,
    TOOL_CALL_START,
    TOOL_CALL_END,
)

# A compact version of Qwen3's template: tools in the system prompt, <tool_call> JSON calls,
# <think> reasoning, and `enable_thinking=false` writing an empty think block.
QWEN3_STYLE_CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content + '\\n\\n' }}{% endif %}"
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
    "{% for tool in tools %}{{ '\\n' + (tool | tojson) }}{% endfor %}{{ '\\n' }}</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, '
    '"arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "{% elif messages[0].role == 'system' %}"
    "<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% elif message.role == 'assistant' %}<|im_start|>assistant\n"
    "{% if message.reasoning_content %}"
    "{{ '<think>\\n' + message.reasoning_content + '\\n</think>\\n\\n' }}"
    "{% endif %}{{ message.content or '' }}"
    "{% for tc in message.tool_calls or [] %}"
    '{{ \'\\n<tool_call>\\n{\\"name\\": \\"\' + tc.function.name + \'\\", \\"arguments\\": \' }}'
    "{{ tc.function.arguments | tojson }}{{ '}\\n</tool_call>' }}{% endfor %}<|im_end|>\n"
    "{% elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n"
    "{{ message.content }}\n</tool_response><|im_end|>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}{% endif %}"
)

# Text the BPE merges are learned from: JSON, English and code-ish fragments, so that
# multi-character tokens (and tokens mixing JSON punctuation) exist as in real vocabularies.
_TRAINING_CORPUS = (
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
    '{"id": 12, "tags": ["a", "b"], "ok": true, "score": -3.5e2, "none": null}',
    '[{"x": 1}, {"y": [2, 3]}, {"z": {"w": false}}]',
    "The capital of France is Paris. Let me think about the question step by step.",
    "def add(a, b):\n    return a + b\n\nprint(add(1, 2))",
    "Hello, world! How are you today? I am fine, thank you.",
    "0123456789 email@example.com 2024-01-31 12:30:00 https://example.org/path?q=1",
    '\\n\\t\\" \\u00e9 caf\u00e9 na\u00efve \u4f60\u597d \u2603',
)


@functools.lru_cache(maxsize=4)
def build_tiny_tokenizer(
    vocab_size: int = 600,
    chat_template: str = QWEN3_STYLE_CHAT_TEMPLATE,
    extra_special: tuple[str, ...] = (),
) -> TokenizerWrapper:
    """A byte-level BPE with reasoning/tool special tokens (and ``extra_special``, e.g. a
    code family's fill-in-the-middle tokens) and a Qwen3-style template (or
    ``chat_template``).

    Cached per vocab size because building the detokenizer map costs a little; callers must
    treat the result as read-only.
    """
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[*SPECIAL_TOKENS, *extra_special],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(list(_TRAINING_CORPUS) * 4, trainer=trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        chat_template=chat_template,
    )
    return TokenizerWrapper(hf, eos_token_ids=[bpe.token_to_id(ENDOFTEXT)])


def tiny_vocab_size(tokenizer: TokenizerWrapper) -> int:
    """Number of token ids the tokenizer can produce (its embedding rows)."""
    return len(tokenizer._tokenizer)


def build_tiny_model(
    tokenizer: TokenizerWrapper,
    *,
    seed: int = 0,
    arch: str = "qwen3",
    hidden_size: int = 32,
    num_layers: int = 2,
) -> nn.Module:
    """A random-weight mlx-lm model (``qwen3``, ``qwen2`` or ``llama``) sized to the
    tokenizer's vocab.

    Random weights give near-uniform, seed-dependent logits: a good adversary for
    constraints, since nothing in the model "wants" to produce valid output.
    """
    mx.random.seed(seed)
    common = dict(
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        intermediate_size=hidden_size * 2,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-6,
        vocab_size=tiny_vocab_size(tokenizer),
        rope_theta=10000.0,
        tie_word_embeddings=True,
    )
    if arch == "qwen3":
        from mlx_lm.models import qwen3

        model = qwen3.Model(
            qwen3.ModelArgs(
                model_type="qwen3",
                head_dim=hidden_size // 4,
                max_position_embeddings=4096,
                **common,
            )
        )
    elif arch == "qwen2":
        from mlx_lm.models import qwen2

        model = qwen2.Model(qwen2.ModelArgs(model_type="qwen2", **common))
    elif arch == "llama":
        from mlx_lm.models import llama

        model = llama.Model(llama.ModelArgs(model_type="llama", **common))
    else:
        raise ValueError(f"unknown tiny architecture {arch!r}: use 'qwen3', 'qwen2' or 'llama'")
    mx.eval(model.parameters())
    return model
