"""Thinking through chat completions on a tiny random-weight model with think tokens
(reasoning format deepseek_r1: generation starts inside the reasoning block)."""

from __future__ import annotations

import openai
import pytest
from servers import tiny_model_server
from shared import HELLO


@pytest.fixture(scope="module")
def tiny():
    with tiny_model_server() as (base, tokenizer):
        yield openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0), tokenizer


def reasoning_tokens(tokenizer, message) -> int:
    return len(tokenizer.encode(message.reasoning_content or "", add_special_tokens=False))


def test_thinking_token_budget_closes_the_block(tiny):
    client, tokenizer = tiny
    free = client.chat.completions.create(model="m", messages=HELLO, max_tokens=60, temperature=0)
    assert reasoning_tokens(tokenizer, free.choices[0].message) > 13
    details = free.usage.completion_tokens_details
    assert details.reasoning_tokens == reasoning_tokens(tokenizer, free.choices[0].message)
    for budget in (3, 10):
        reply = client.chat.completions.create(
            model="m",
            messages=HELLO,
            max_tokens=60,
            temperature=0,
            extra_body={"thinking_token_budget": budget},
        )
        message = reply.choices[0].message
        assert reasoning_tokens(tokenizer, message) <= budget + 1  # close may merge a token
        assert reply.usage.completion_tokens > reasoning_tokens(tokenizer, message)


def test_reasoning_effort_maps_to_a_budget_and_streams_like_non_stream(tiny):
    """ "minimal" is 256 reasoning tokens: with room for 300 the budget, not max_tokens,
    closes the block and the answer goes on after it."""
    client, tokenizer = tiny
    kwargs = dict(
        model="m", messages=HELLO, max_tokens=300, temperature=0, reasoning_effort="minimal"
    )
    reply = client.chat.completions.create(**kwargs)
    whole = reply.choices[0].message
    assert 0 < reasoning_tokens(tokenizer, whole) <= 257  # close may merge a token
    assert reply.usage.completion_tokens > reasoning_tokens(tokenizer, whole)
    free = client.chat.completions.create(**{**kwargs, "reasoning_effort": None})
    assert reasoning_tokens(tokenizer, free.choices[0].message) > 257  # no budget: thinks on
    chunks = list(client.chat.completions.create(**kwargs, stream=True))
    reasoning = "".join(
        getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices
    )
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert reasoning == (whole.reasoning_content or "")
    assert content == (whole.content or "")


def test_unknown_reasoning_effort_is_a_400(tiny):
    client, _ = tiny
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="m", messages=HELLO, max_tokens=5, reasoning_effort="enormous"
        )
