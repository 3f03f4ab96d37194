"""One meaning per request field, whatever the surface: the thinking switch reaches a template
that reads ``thinking`` (not ``enable_thinking``) through /v1/messages and /v1/responses as
through chat completions, and one reasoning effort is one budget everywhere.

A tiny random-weight model (its output stays inside the think block unless a budget closes
it) behind the real app, driven by the official SDKs over real HTTP.
"""

from __future__ import annotations

import anthropic
import openai
import pytest
from servers import tiny_model_server
from shared import GREEDY, HELLO

from vllm_mlx.chat.thinking_switch import EFFORT_BUDGETS

# My own minimal template in the DeepSeek V3.1 manner: the switch is called ``thinking``;
# off writes a closed think block, on (the default) opens one.
THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if thinking is defined and not thinking %}<think>\n\n</think>\n\n"
    "{% else %}<think>\n{% endif %}{% endif %}"
)


def clients(chat_template: str | None = None):
    with tiny_model_server(chat_template=chat_template) as (base, tokenizer):
        yield (
            openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0),
            anthropic.Anthropic(base_url=base, api_key="k", max_retries=0),
            tokenizer,
        )


@pytest.fixture(scope="module")
def tiny():
    """The template reading ``thinking``."""
    yield from clients(THINKING_TEMPLATE)


@pytest.fixture(scope="module")
def qwen_tiny():
    """The Qwen3-style template, whose reasoning re-tokenizes to the tokens generated (the
    usage's reasoning count is re-tokenized from the text: pipeline.Usage)."""
    yield from clients()


def test_thinking_disabled_through_messages_switches_a_template_reading_thinking(tiny):
    _, client, _ = tiny
    kwargs = dict(model="m", max_tokens=8, messages=HELLO, extra_body=GREEDY)
    on = client.messages.create(**kwargs)
    off = client.messages.create(**kwargs, thinking={"type": "disabled"})
    assert on.content[0].type == "thinking"
    assert [b.type for b in off.content] == ["text"]
    # count_tokens renders through the same path: the closed think block is in the prompt
    counted_off = client.messages.count_tokens(
        model="m", messages=HELLO, thinking={"type": "disabled"}
    )
    counted_on = client.messages.count_tokens(model="m", messages=HELLO)
    assert counted_off.input_tokens > counted_on.input_tokens
    for reply, counted in ((on, counted_on), (off, counted_off)):
        used = reply.usage.input_tokens + (reply.usage.cache_read_input_tokens or 0)
        assert used == counted.input_tokens


def test_effort_none_through_responses_switches_a_template_reading_thinking(tiny):
    client, _, _ = tiny
    kwargs = dict(model="m", input="Hello", max_output_tokens=8, temperature=0)
    on = client.responses.create(**kwargs)
    off = client.responses.create(**kwargs, reasoning={"effort": "none"})
    assert [item.type for item in on.output] == ["reasoning"]
    assert [item.type for item in off.output] == ["message"] and off.output_text
    assert off.usage.input_tokens > on.usage.input_tokens


def test_effort_none_through_chat_switches_a_template_reading_thinking(tiny):
    client, _, _ = tiny
    kwargs = dict(model="m", messages=HELLO, max_tokens=8, temperature=0)
    on = client.chat.completions.create(**kwargs).choices[0].message
    off = client.chat.completions.create(**kwargs, reasoning_effort="none").choices[0].message
    assert on.reasoning_content and not on.content
    assert not getattr(off, "reasoning_content", None) and off.content


def test_one_effort_is_one_budget_on_every_surface(qwen_tiny):
    """ "minimal" caps reasoning at 256 tokens on chat and on Responses, as Anthropic's
    ``budget_tokens: 256`` does: the same greedy generation gives the same split."""
    chat_client, messages_client, tokenizer = qwen_tiny
    budget = EFFORT_BUDGETS["minimal"]
    assert budget == 256
    chat = chat_client.chat.completions.create(
        model="m", messages=HELLO, max_tokens=300, temperature=0, reasoning_effort="minimal"
    )
    response = chat_client.responses.create(
        model="m",
        input="Hello",
        max_output_tokens=300,
        temperature=0,
        reasoning={"effort": "minimal"},
    )
    message = messages_client.messages.create(
        model="m",
        max_tokens=300,
        messages=HELLO,
        extra_body=GREEDY,
        thinking={"type": "enabled", "budget_tokens": budget},
    )
    thought = [b.thinking for b in message.content if b.type == "thinking"]
    used = {
        "chat": chat.usage.completion_tokens_details.reasoning_tokens,
        "responses": response.usage.output_tokens_details.reasoning_tokens,
        "messages": len(tokenizer.encode(thought[0], add_special_tokens=False)),
    }
    assert len(set(used.values())) == 1, used
    assert 0 < used["chat"] <= budget + 1  # the close marker may merge with the last token
    # the budget, not max_tokens, ended the reasoning: generation went on past it
    assert chat.usage.completion_tokens > used["chat"]
    assert response.usage.output_tokens > used["responses"]
    assert message.usage.output_tokens > used["messages"]
