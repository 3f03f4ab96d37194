"""What the forced-call tests share: a family's forced-call constraint, feeding a text through
it token by token, tools with bounded schemas and sampling a random-weight model under
processors until EOS."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.generate import generate_step
from mlx_lm.sample_utils import make_sampler
from parser_cases import WEATHER_TOOLS

from vllm_mlx.constrained import build_logits_processors
from vllm_mlx.families.catalog import TOOL_CALL_FORMATS


def matcher(tokenizer, family, tool_choice="required", tools=WEATHER_TOOLS, parallel=True):
    (processor,) = build_logits_processors(
        tokenizer,
        tool_choice=tool_choice,
        tools=tools,
        tool_format=TOOL_CALL_FORMATS[family],
        parallel_tool_calls=parallel,
    )
    return processor.constraint


def accepts(tokenizer, constraint, text: str) -> bool:
    """Feed ``text`` token by token; True when every token is accepted and EOS is allowed."""
    ids = tokenizer._tokenizer.encode(text, add_special_tokens=False)
    for i in range(len(ids)):
        mask = constraint.allowed_mask(ids[:i])
        if mask is None or not mask[ids[i]]:
            return False
    final = constraint.allowed_mask(ids)
    return final is not None and all(final[e] for e in tokenizer.eos_token_ids)


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 8},
                    "days": {"type": "integer", "minimum": 1, "maximum": 14},
                    "unit": {"enum": ["c", "f"]},
                    # Typed beside the $ref: XML parsers type values by the declared type.
                    "point": {"type": "object", "$ref": "#/$defs/point"},
                },
                "required": ["city", "days"],
                "additionalProperties": False,
                "$defs": {
                    "point": {
                        "type": "object",
                        "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 99}},
                        "required": ["x"],
                        "additionalProperties": False,
                    }
                },
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "noop",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        },
    },
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def sample_ids(model, tokenizer, prompt: list[int], processors, seed, max_tokens=300) -> list[int]:
    """Sample at temperature 1 until EOS (excluded); a test fails without EOS in ``max_tokens``."""
    mx.random.seed(seed)
    out: list[int] = []
    for token, _ in generate_step(
        mx.array(prompt),
        model,
        max_tokens=max_tokens,
        sampler=make_sampler(temp=1.0),
        logits_processors=processors,
    ):
        if token in tokenizer.eos_token_ids:
            return out
        out.append(token)
    pytest.fail(f"no EOS within {max_tokens} tokens: {tokenizer.decode(out)!r}")


def sample(model, tokenizer, processors, seed, max_tokens=250) -> str:
    """A one-turn ChatML prompt's sampled answer."""
    prompt = tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    return tokenizer.decode(sample_ids(model, tokenizer, prompt, processors, seed, max_tokens))
