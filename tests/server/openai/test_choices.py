"""``n`` > 1 on /v1/chat/completions and /v1/completions through the openai client on a
tiny random-weight model: n indexed choices, distinct and reproducible with a seed, the
prompt prefilled once for all of them when it is long enough to share."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest
from servers import pipeline_server, replay_server
from tiny_models import build_tiny_model, build_tiny_tokenizer

from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.prefix_cache import PrefixCache
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.options import RuntimeOptions
from vllm_mlx.pipeline import Pipeline
from vllm_mlx.request import Sampling
from vllm_mlx.server.openai.choices import all_choices, seeded

LONG = "The capital of France is Paris. " * 60  # past the shared-prefill minimum


@pytest.fixture(scope="module")
def base():
    """A tiny random model with a prefix cache, as the runtime builds one."""
    tokenizer = build_tiny_tokenizer()
    source = ModelBatchSource(build_tiny_model(tokenizer), prefix_cache=PrefixCache(2**28))
    engine = Engine(source, tokenizer)
    pipeline = Pipeline(engine, context_length=2048, options=RuntimeOptions.of(max_tokens=64))
    with pipeline_server(pipeline, "tiny") as url:
        yield url


@pytest.fixture(scope="module")
def client(base):
    return openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0, timeout=120)


def test_chat_n_choices_are_distinct_and_reproducible_with_a_seed(client):
    kwargs = dict(
        model="tiny", messages=[{"role": "user", "content": "Hi"}], n=3, seed=11, max_tokens=8
    )
    first, again = (
        client.chat.completions.create(**kwargs),
        client.chat.completions.create(**kwargs),
    )
    texts = [c.message.content for c in first.choices]
    assert [c.index for c in first.choices] == [0, 1, 2]
    assert len(set(texts)) == 3
    assert [c.message.content for c in again.choices] == texts
    one = client.chat.completions.create(**{**kwargs, "n": 1})
    assert one.choices[0].message.content == texts[0]  # choice 0 samples with the seed itself
    assert first.usage.prompt_tokens == one.usage.prompt_tokens  # the prompt counted once
    assert 3 <= first.usage.completion_tokens <= 24  # every choice's tokens


def test_completions_n_choices_are_indexed_and_differ(client):
    reply = client.completions.create(model="tiny", prompt=LONG, n=3, seed=5, max_tokens=4)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert len({c.text for c in reply.choices}) > 1
    assert reply.usage.prompt_tokens > 256


def test_the_n_sequences_share_one_prefill():
    tokenizer = build_tiny_tokenizer()
    source = ModelBatchSource(build_tiny_model(tokenizer), prefix_cache=PrefixCache(2**28))
    engine = Engine(source, tokenizer)
    pipeline = Pipeline(engine, context_length=2048, options=RuntimeOptions.of(max_tokens=64))

    def prepare(index: int):
        return pipeline.prepare_completion(LONG, seeded(Sampling(seed=3), index), 4)

    try:
        results = asyncio.run(all_choices(pipeline, prepare(0), prepare, 3))
    finally:
        engine.close()
    prompt = results[0].usage.prompt_tokens
    # the first prefilled the prompt; the others waited and started from the prefix cache
    assert [r.usage.cached_tokens for r in results] == [0, prompt - 1, prompt - 1]


def test_streamed_choices_carry_their_index_and_equal_the_whole(client):
    kwargs = dict(
        model="tiny", messages=[{"role": "user", "content": "Hi"}], n=3, seed=2, max_tokens=6
    )
    whole = client.chat.completions.create(**kwargs)
    chunks = list(
        client.chat.completions.create(
            **kwargs, stream=True, stream_options={"include_usage": True}
        )
    )
    texts = {i: "" for i in range(3)}
    finished = {}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finished[choice.index] = choice.finish_reason
    assert [texts[i] for i in range(3)] == [c.message.content for c in whole.choices]
    assert finished == {c.index: c.finish_reason for c in whole.choices}
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens

    plain = dict(model="tiny", prompt=LONG, n=2, seed=9, max_tokens=4)
    text_whole = client.completions.create(**plain)
    pieces = {0: "", 1: ""}
    for chunk in client.completions.create(**plain, stream=True):
        for choice in chunk.choices:
            pieces[choice.index] += choice.text
    assert [pieces[0], pieces[1]] == [c.text for c in text_whole.choices]


def test_a_choice_failing_mid_stream_ends_the_stream_with_an_error():
    with replay_server("Hello there, a long answer.", fail_after=2) as (url, _):
        body = {"messages": [{"role": "user", "content": "Hi"}], "n": 2, "stream": True}
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
            frames = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert frames[-1] == "data: [DONE]"
    assert any('"error"' in frame and "injected fault" in frame for frame in frames)
