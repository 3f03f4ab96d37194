"""Defaults that suit agents: sampling from the model (generation_config.json over the family
table, GGUF sampling keys carried into generation_config.json), operator flags as overrides
only, and no server-side cut on a request without a token limit (``--max-tokens-cap``
bounds every request). Replay runtimes and temporary folders: no model."""

from __future__ import annotations

import json

import pytest
from tiny_models import build_tiny_tokenizer

from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.sources import ReplayBatchSource
from vllm_mlx.models.sampling_defaults import family_sampling, model_sampling
from vllm_mlx.options import RuntimeOptions
from vllm_mlx.pipeline import Pipeline
from vllm_mlx.request import ChatRequest
from vllm_mlx.runtime import build_replay_runtime

HI = [{"role": "user", "content": "hi"}]


def folder(tmp_path, config: dict, generation: dict | None = None):
    (tmp_path / "config.json").write_text(json.dumps(config))
    if generation is not None:
        (tmp_path / "generation_config.json").write_text(json.dumps(generation))
    return tmp_path


def test_generation_config_over_the_family_row(tmp_path):
    path = folder(
        tmp_path,
        {"model_type": "qwen3_moe"},
        {"temperature": 0.7, "top_k": 40.0, "min_p": "high", "do_sample": True},
    )
    assert model_sampling(path) == {"temperature": 0.7, "top_p": 0.95, "top_k": 40}


def test_family_row_and_neutral(tmp_path):
    assert model_sampling(folder(tmp_path, {"model_type": "gemma3_text"})) == family_sampling(
        "gemma"
    )
    assert family_sampling("qwen3") != family_sampling("qwen2")  # longest prefix wins
    assert model_sampling(folder(tmp_path, {"model_type": "unknown-arch"})) == {}


def test_operator_flags_override_only_what_they_set():
    runtime = build_replay_runtime("x", options=RuntimeOptions.of(temperature=0.1))
    try:
        defaults = runtime.pipeline.sampling_defaults
        # the default model is llama-type with no sampling in its generation_config
        assert (defaults.temperature, defaults.top_p) == (0.1, family_sampling("llama")["top_p"])
    finally:
        runtime.close()


@pytest.fixture(scope="module")
def engine():
    tokenizer = build_tiny_tokenizer()
    engine = Engine(ReplayBatchSource([tokenizer.eos_token_id]), tokenizer)
    yield engine
    engine.close()


def limit(pipeline: Pipeline, **fields) -> int:
    return pipeline.prepare_chat(ChatRequest(HI, **fields)).generation.params.max_tokens


def test_no_limit_means_the_room_the_context_leaves(engine):
    pipeline = Pipeline(engine, context_length=3000)
    room = 3000 - len(pipeline.render(ChatRequest(HI))[0].token_ids)
    assert limit(pipeline) == room > 2048


def test_the_operator_cap_bounds_every_request(engine):
    pipeline = Pipeline(
        engine, context_length=3000, options=RuntimeOptions.of(max_tokens_cap=100, max_tokens=500)
    )
    assert limit(pipeline) == 100
    assert limit(pipeline, max_tokens=1000) == 100
    assert limit(pipeline, max_tokens=32000, max_tokens_policy="cap") == 100
    assert limit(pipeline, max_tokens=7) == 7
