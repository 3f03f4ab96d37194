"""The token-id cases that crashed the process, and the cancelled-metrics count, on the
real default model: an id past the vocabulary would reach MLX's
native code here, so an unfixed server dies instead of answering. Few cases, max_tokens=1."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

VOCAB = 49152  # SmolLM2-135M: tokenizer and embedding rows
HI = [{"role": "user", "content": "Hi"}]


@pytest.mark.parametrize(
    ("bias", "param"),
    [({str(VOCAB): 5}, "logit_bias"), ({"-1": 5}, "logit_bias"), ({"9" * 40: 5}, "logit_bias")],
    ids=["at-vocab", "negative", "40-digits"],
)
def test_logit_bias_outside_the_vocabulary_is_a_400(openai_client, real_server, bias, param):
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client.chat.completions.create(
            model="smollm2", messages=HI, max_tokens=1, logit_bias=bias
        )
    assert caught.value.body["param"] == param
    assert httpx.get(f"{real_server}/health", timeout=30).status_code == 200


def test_prompt_ids_outside_the_vocabulary_are_a_400(openai_client, real_server):
    for prompt in ([10**9, 5], [VOCAB], [-3]):
        with pytest.raises(openai.BadRequestError) as caught:
            openai_client.completions.create(model="smollm2", prompt=prompt, max_tokens=1)
        assert caught.value.body["param"] == "prompt"
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client.completions.create(
            model="smollm2", prompt="Hi", max_tokens=1, extra_body={"stop_token_ids": [VOCAB]}
        )
    assert caught.value.body["param"] == "stop_token_ids"
    # the edges of the vocabulary are fine, and the process is still there to say so
    ok = openai_client.completions.create(
        model="smollm2", prompt=[1, VOCAB - 1], max_tokens=1, logit_bias={str(VOCAB - 1): -1}
    )
    assert ok.choices[0].finish_reason == "length"


def _finished(base: str) -> tuple[float, float]:
    """(cancelled generations, completion tokens) from /metrics."""
    cancelled = tokens = 0.0
    for line in httpx.get(f"{base}/metrics", timeout=30).text.splitlines():
        if line.startswith('vllm_mlx_generations_finished_total{finish_reason="cancelled"}'):
            cancelled = float(line.split()[-1])
        if line.startswith("vllm_mlx_completion_tokens_total "):
            tokens = float(line.split()[-1])
    return cancelled, tokens


def test_a_client_disconnect_counts_as_cancelled_with_its_tokens(real_server):
    before_cancelled, before_tokens = _finished(real_server)
    body = {"model": "smollm2", "messages": HI, "max_tokens": 200, "stream": True}
    with httpx.stream("POST", f"{real_server}/v1/chat/completions", json=body, timeout=120) as r:
        seen = 0
        for line in r.iter_lines():
            if line.startswith("data: {"):
                seen += 1
            if seen >= 4:
                break  # leave mid-stream: the connection closes
    for _ in range(100):  # the server notices the disconnect at its next write
        cancelled, tokens = _finished(real_server)
        if cancelled > before_cancelled:
            break
        time.sleep(0.2)
    assert cancelled == before_cancelled + 1
    assert tokens >= before_tokens + 3
