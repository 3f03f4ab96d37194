"""`--draft-model` through the real CLI server and the OpenAI SDK: the default model as its
own draft answers exactly like the server without one, and /metrics counts the drafts."""

from __future__ import annotations

import re

import httpx
import openai
import pytest
from servers import cli_server

pytestmark = pytest.mark.slow

MESSAGES = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture(scope="module")
def draft_server(tmp_path_factory):
    log = tmp_path_factory.mktemp("draft") / "server.log"
    with cli_server("--draft-model", "default", "--num-draft-tokens", "3", log_path=log) as base:
        yield base


def counter(text: str, name: str) -> float:
    return float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))


def test_greedy_answer_matches_the_server_without_a_draft(draft_server, openai_client):
    client = openai.OpenAI(base_url=f"{draft_server}/v1", api_key="x", max_retries=0, timeout=300)
    params = dict(model="m", messages=MESSAGES, max_tokens=16, temperature=0)
    with_draft = client.chat.completions.create(**params).choices[0].message.content
    without = openai_client.chat.completions.create(**params).choices[0].message.content
    assert with_draft == without
    metrics = httpx.get(f"{draft_server}/metrics").text
    drafted = counter(metrics, "vllm_mlx_spec_draft_tokens_total")
    accepted = counter(metrics, "vllm_mlx_spec_accepted_tokens_total")
    assert drafted > 0 and accepted == drafted  # a draft equal to the target is always right
