"""The embedded SmolLM2-135M (Llama: 30 layers, 9 heads, 3 KV heads) sharded over loopback
ranks: tensor over 3 (mlx-lm's shard), pipeline over 2 (vllm-mlx's Llama split), each
answering as one process does."""

from __future__ import annotations

import openai
import pytest

from .ranks_server import complete, sharded_server

PROMPT = "The capital of France is"
TOKENS = 8


@pytest.fixture(scope="module")
def reference(real_server) -> str:
    return complete(real_server, PROMPT, TOKENS)["choices"][0]["text"]


@pytest.mark.parametrize(("mode", "ranks"), [("pipeline", 2), ("tensor", 3)])
def test_the_embedded_model_sharded_answers_as_one_process(reference, tmp_path, mode, ranks):
    with sharded_server(None, mode, ranks, tmp_path / "server.log") as server:
        assert complete(server.base_url, PROMPT, TOKENS)["choices"][0]["text"] == reference
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="k", max_retries=0)
        reply = client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "Say yes or no."}],
            max_tokens=6,
            temperature=0,
        )
        assert reply.choices[0].message.content
