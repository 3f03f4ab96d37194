"""Fill-in-the-middle through the server on tiny tokenizers with a code family's FIM tokens:
``suffix`` on /v1/completions (openai client), Ollama ``generate`` with ``suffix`` (ollama
client) and llama.cpp's ``/infill``. An echo engine answers with the prompt it was given,
so the FIM order is checked as the model sees it; a tiny random model generates for real; a
model without FIM tokens is a 400 in each API's shape."""

from __future__ import annotations

import json
from contextlib import contextmanager

import httpx
import ollama
import openai
import pytest
from servers import EchoSource, pipeline_server
from tiny_models import build_tiny_model, build_tiny_tokenizer

from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.options import RuntimeOptions
from vllm_mlx.pipeline import Pipeline

QWEN_FIM = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>", "<|file_sep|>")
PREFIX, SUFFIX = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))"


@contextmanager
def fim_server(echo: bool, extra_special: tuple[str, ...] = QWEN_FIM):
    tokenizer = build_tiny_tokenizer(extra_special=extra_special)
    if echo:
        source = EchoSource(set(tokenizer.eos_token_ids))
    else:
        source = ModelBatchSource(build_tiny_model(tokenizer))
    engine = Engine(source, tokenizer)
    pipeline = Pipeline(engine, context_length=2048, options=RuntimeOptions.of(max_tokens=256))
    with pipeline_server(pipeline, "coder") as base:
        yield base


@pytest.fixture(scope="module")
def echo_base():
    with fim_server(echo=True) as base:
        yield base


def test_completions_suffix_is_the_models_fim_prompt(echo_base):
    client = openai.OpenAI(base_url=f"{echo_base}/v1", api_key="k", max_retries=0)
    reply = client.completions.create(model="coder", prompt=PREFIX, suffix=SUFFIX)
    assert reply.choices[0].text == f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>"
    streamed = client.completions.create(model="coder", prompt=PREFIX, suffix=SUFFIX, stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == reply.choices[0].text


def test_ollama_generate_suffix_and_infill_build_the_same_prompt(echo_base):
    client = ollama.Client(host=echo_base, timeout=60)
    generated = client.generate(model="coder", prompt=PREFIX, suffix=SUFFIX)
    filled = httpx.post(
        f"{echo_base}/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX}, timeout=60
    ).json()
    expected = f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>"
    assert generated.response == filled["content"] == expected
    assert filled["stop"] is True and filled["stop_type"] == "eos"
    assert filled["tokens_evaluated"] == generated.prompt_eval_count > 10


def test_infill_puts_extra_files_first_and_prompt_after_the_prefix(echo_base):
    body = {
        "input_prefix": PREFIX,
        "input_suffix": SUFFIX,
        "prompt": "a",
        "input_extra": [{"filename": "util.py", "text": "X = 1"}],
        "n_predict": 100,
    }
    with httpx.stream("POST", f"{echo_base}/infill", json={**body, "stream": True}) as response:
        frames = [
            json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")
        ]
    whole = httpx.post(f"{echo_base}/infill", json=body, timeout=60).json()
    # the echo stops at the file separator, a token that ends a middle
    assert whole["content"] == "" and whole["tokens_predicted"] == 1
    assert frames[-1]["stop"] is True and all(not f["stop"] for f in frames[:-1])
    assert "".join(f["content"] for f in frames) == whole["content"]


def test_a_real_tiny_model_fills_the_gap_and_shows_insert():
    with fim_server(echo=False) as base:
        client = ollama.Client(host=base, timeout=120)
        reply = client.generate(
            model="coder", prompt=PREFIX, suffix=SUFFIX, options={"num_predict": 8, "seed": 3}
        )
        again = client.generate(
            model="coder", prompt=PREFIX, suffix=SUFFIX, options={"num_predict": 8, "seed": 3}
        )
        shown = client.show("coder")
    assert reply.eval_count <= 8 and reply.done
    assert reply.response == again.response
    assert "insert" in shown.capabilities


def test_a_model_without_fim_tokens_is_a_400_in_each_shape():
    with fim_server(echo=True, extra_special=()) as base:
        completions = httpx.post(
            f"{base}/v1/completions", json={"prompt": PREFIX, "suffix": SUFFIX}, timeout=60
        )
        generate = httpx.post(f"{base}/api/generate", json={"prompt": PREFIX, "suffix": SUFFIX})
        infill = httpx.post(f"{base}/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX})
        shown = ollama.Client(host=base).show("coder")
    assert completions.status_code == generate.status_code == infill.status_code == 400
    assert completions.json()["error"]["param"] == "suffix"
    assert "fill-in-the-middle" in completions.json()["error"]["message"]
    assert "fill-in-the-middle" in generate.json()["error"]
    assert infill.json()["error"]["type"] == "invalid_request_error"
    assert "fill-in-the-middle" in infill.json()["error"]["message"]
    assert "insert" not in shown.capabilities
