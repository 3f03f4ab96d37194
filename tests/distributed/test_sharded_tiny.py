"""Sharded servers on tiny random-weight models over 2 and 3 loopback ranks (ring): greedy
output equal to one process, continuous batching and cancellation across ranks, a grammar
and a thinking budget decided on rank 0, and a killed rank ending in 503s.

The Llama model is pipelined by vllm-mlx's own split, the Qwen2 model by mlx-lm's.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import anthropic
import httpx
import openai
import pytest

from .ranks_server import complete, follower_pids, sharded_server
from .tiny_folder import write_tiny_folder

PROMPTS = ("The capital of France is", "def add(a, b):")
TOKENS = 8
THINKING = ("--reasoning-parser", "deepseek_r1", "--max-num-seqs", "4")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return {arch: str(write_tiny_folder(root / arch, arch=arch)) for arch in ("llama", "qwen2")}


@pytest.fixture(scope="module")
def servers(folders, tmp_path_factory):
    """(arch, mode, ranks) -> base URL, started on first use and kept for the module."""
    logs = tmp_path_factory.mktemp("logs")
    started: dict = {}
    stack = []

    def get(arch: str, mode: str | None, ranks: int = 1) -> str:
        key = (arch, mode, ranks)
        if key not in started:
            log = logs / f"{arch}-{mode}-{ranks}.log"
            context = sharded_server(folders[arch], mode, ranks, log, *THINKING)
            started[key] = context.__enter__().base_url
            stack.append(context)
        return started[key]

    yield get
    for context in reversed(stack):
        context.__exit__(None, None, None)


def texts(base: str) -> list[str]:
    return [complete(base, p, TOKENS)["choices"][0]["text"] for p in PROMPTS]


@pytest.mark.parametrize(("arch", "ranks"), [("llama", 2), ("qwen2", 3)])
def test_pipeline_output_equals_one_process(servers, arch, ranks):
    sharded = servers(arch, "pipeline", ranks)
    assert texts(sharded) == texts(servers(arch, None))
    health = httpx.get(f"{sharded}/health").json()["distributed"]
    assert health["world_size"] == ranks and health["mode"] == "pipeline"
    assert health["backend"] == "ring" and health["status"] == "ok"
    assert len(health["rank_roles"]) == ranks and health["rank_roles"][0].startswith("leader")


@pytest.mark.parametrize("ranks", [2, 3])
def test_tensor_parallel_first_tokens_equal_one_process(servers, ranks):
    """float32 all-sums add in another order than one matmul: equal up to rounding, so the
    greedy tokens of a short answer are the same (docs/distributed.md states the bound)."""
    assert texts(servers("llama", "tensor", ranks)) == texts(servers("llama", None))


def test_concurrent_and_cancelled_requests_keep_the_ranks_in_step(servers):
    """Requests join and leave one batch on every rank; a stream closed early is removed
    on all ranks, and the ones after it still match one process."""
    sharded, single = servers("llama", "tensor", 2), servers("llama", None)
    prompts = [*PROMPTS, "Once upon a time"]
    lengths = [TOKENS, TOKENS + 4, TOKENS - 3]
    with ThreadPoolExecutor(len(prompts)) as pool:
        together = list(
            pool.map(lambda a: complete(sharded, *a), zip(prompts, lengths, strict=True))
        )
    alone = [complete(single, p, n) for p, n in zip(prompts, lengths, strict=True)]
    assert [r["choices"][0]["text"] for r in together] == [r["choices"][0]["text"] for r in alone]
    client = openai.OpenAI(base_url=f"{sharded}/v1", api_key="k", max_retries=0)
    # SmolLM2's end tokens banned: left alone, this stream runs its 2000 tokens (many seconds)
    no_end = {"0": -100, "1": -100, "2": -100}
    stream = client.completions.create(
        model="m", prompt=PROMPTS[0], max_tokens=2000, temperature=0, stream=True, logit_bias=no_end
    )
    next(iter(stream))
    stream.close()
    deadline = time.monotonic() + 10
    while httpx.get(f"{sharded}/health").json()["running"] and time.monotonic() < deadline:
        time.sleep(0.05)
    # removed on rank 0 long before its limit, and on the others: they are still in step
    assert httpx.get(f"{sharded}/health").json()["running"] == 0, "the closed stream kept running"
    assert texts(sharded) == texts(single)


def test_a_grammar_and_a_thinking_budget_are_decided_on_rank_0(servers):
    sharded, single = servers("llama", "tensor", 2), servers("llama", None)
    schema = {
        "type": "object",
        "properties": {"answer": {"enum": ["yes", "no", "maybe"]}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    constrained = dict(
        model="m",
        messages=[{"role": "user", "content": "Is it raining?"}],
        max_tokens=24,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
        extra_body={"thinking_token_budget": 0},  # the answer at once, under the grammar
    )
    budget = dict(
        model="m",
        messages=[{"role": "user", "content": "Think first."}],
        max_tokens=16,
        temperature=0,
        extra_body={"thinking_token_budget": 3},
    )
    replies = {}
    for name, base in (("sharded", sharded), ("single", single)):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0)
        replies[name] = [
            client.chat.completions.create(**constrained).choices[0].message,
            client.chat.completions.create(**budget),
        ]
    message, thought = replies["sharded"]
    assert json.loads(message.content)["answer"] in ("yes", "no", "maybe")
    reasoning = thought.choices[0].message.reasoning_content or ""
    assert 0 < thought.usage.completion_tokens_details.reasoning_tokens <= 4
    assert reasoning and thought.choices[0].message.content
    single_message, single_thought = replies["single"]
    assert message.content == single_message.content
    assert thought.choices[0].message == single_thought.choices[0].message


def test_a_killed_rank_ends_streams_and_answers_503(folders, tmp_path):
    with sharded_server(
        folders["llama"], "pipeline", 2, tmp_path / "server.log", "--max-tokens", "400"
    ) as server:
        base = server.base_url
        lines: list[str] = []
        first = threading.Event()

        def stream() -> None:
            body = {"model": "m", "prompt": PROMPTS[0], "max_tokens": 400, "stream": True}
            with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=120) as r:
                for line in r.iter_lines():
                    lines.append(line)
                    first.set()

        reader = threading.Thread(target=stream)
        reader.start()
        assert first.wait(120)
        (follower,) = follower_pids(server.pid)
        os.kill(follower, signal.SIGKILL)
        reader.join(timeout=90)
        assert not reader.is_alive(), "the stream hung after its rank died"
        frames = [line for line in lines if line]
        assert any('"error"' in line for line in frames) and frames[-1] == "data: [DONE]"
        health = httpx.get(f"{base}/health")
        assert health.status_code == 503
        assert "rank" in health.json()["distributed"]["failure"]
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0)
        with pytest.raises(openai.APIStatusError) as failed:
            client.completions.create(model="m", prompt="Hi", max_tokens=4)
        assert failed.value.status_code == 503
        claude = anthropic.Anthropic(base_url=base, api_key="k", max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as refused:
            claude.messages.create(
                model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=4
            )
        assert refused.value.body["error"]["type"] == "overloaded_error"
