"""The Python API on the real default model."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vllm_mlx import LLM

pytestmark = pytest.mark.slow

FRANCE = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def llm():
    with LLM() as model:
        yield model


def test_chat_returns_message_and_usage(llm):
    result = llm.chat(FRANCE, temperature=0, max_tokens=12)
    assert "Paris" in result.message.content
    assert result.finish_reason in ("stop", "length")
    assert result.usage.prompt_tokens > 0 and 0 < result.usage.completion_tokens <= 12


def test_chat_stream_joins_to_chat(llm):
    whole = llm.chat(FRANCE, temperature=0, max_tokens=12)
    events = list(llm.chat_stream(FRANCE, temperature=0, max_tokens=12))
    assert "".join(e.delta.content for e in events) == whole.message.content
    assert events[-1].finish_reason == whole.finish_reason
    # the repeated prompt is read from the prefix cache; the counts are the same
    assert replace(events[-1].usage, cached_tokens=0) == replace(whole.usage, cached_tokens=0)


def test_generate_and_stream(llm):
    out = llm.generate("The capital of France is", temperature=0, max_tokens=5)
    assert out.completion_tokens <= 5 and out.text
    streamed = "".join(
        e.delta.content
        for e in llm.generate_stream("The capital of France is", temperature=0, max_tokens=5)
    )
    assert streamed == out.text


def test_unknown_sampling_argument_is_a_type_error(llm):
    with pytest.raises(TypeError, match="temprature"):
        llm.chat(FRANCE, temprature=0)
