"""The prefix cache for agent sessions, on tiny random-weight models through the real
pipeline: reuse up to the last common message after a rewritten assistant turn (trimmable
KV and a hybrid conv/attention model whose cache cannot be trimmed), and warm-up."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models import lfm2
from tiny_models import build_tiny_model, tiny_vocab_size

from vllm_mlx.chat.template import render_chat
from vllm_mlx.engine.boundaries import history_end
from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.prefix_cache import PrefixCache
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.options import RuntimeOptions
from vllm_mlx.pipeline import Pipeline
from vllm_mlx.request import ChatRequest, Sampling
from vllm_mlx.runtime import warm_up

SYSTEM = {"role": "system", "content": "You are a careful coding agent. " * 6}
TURN1 = [SYSTEM, {"role": "user", "content": "List the files in the project."}]


def build_hybrid(tokenizer, seed: int = 0):
    """A tiny LFM2: a short-convolution layer (ArraysCache, not trimmable) + attention."""
    mx.random.seed(seed)
    args = lfm2.ModelArgs(
        model_type="lfm2",
        vocab_size=tiny_vocab_size(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        norm_eps=1e-5,
        conv_bias=False,
        conv_L_cache=3,
        block_dim=32,
        block_multiple_of=8,
        block_ffn_dim_multiplier=1.0,
        block_auto_adjust_ff_dim=False,
        intermediate_size=64,
        full_attn_idxs=[1],
    )
    model = lfm2.Model(args)
    mx.eval(model.parameters())
    return model


@pytest.fixture(scope="module", params=["qwen3", "lfm2"])
def model(request, tokenizer):
    if request.param == "lfm2":
        return build_hybrid(tokenizer)
    return build_tiny_model(tokenizer, seed=1)


def pipeline_for(model, tokenizer, cache: PrefixCache | None) -> Pipeline:
    engine = Engine(ModelBatchSource(model, prefix_cache=cache), tokenizer)
    return Pipeline(engine, context_length=4096, options=RuntimeOptions.of(max_tokens=8))


def chat(pipeline: Pipeline, messages: list[dict], max_tokens: int = 8):
    request = ChatRequest(
        messages=messages,
        sampling=Sampling(temperature=0.0),
        max_tokens=max_tokens,
    )
    prepared = pipeline.prepare_chat(request)
    result = pipeline.complete_sync(prepared)
    return result, prepared.generation


def last_message_end(tokenizer, messages) -> int:
    prompt = render_chat(tokenizer, messages)
    (end,) = history_end(tokenizer, prompt.token_ids, prompt.tail)
    return end


def test_rewritten_assistant_turn_reuses_up_to_the_last_common_message(model, tokenizer):
    cached = pipeline_for(model, tokenizer, PrefixCache(64 << 20))
    cold = pipeline_for(model, tokenizer, None)
    try:
        chat(cached, TURN1)
        # The client rewrote the assistant's answer (as agents do when they drop reasoning
        # or re-serialize tool calls); everything before it is unchanged.
        turn2 = [
            *TURN1,
            {"role": "assistant", "content": "I rewrote this answer."},
            {"role": "user", "content": "Now open the README."},
        ]
        result, generation = chat(cached, turn2)
        boundary = last_message_end(tokenizer, TURN1)
        assert result.usage.cached_tokens >= boundary
        assert result.usage.cached_tokens < len(generation.prompt_tokens)
        expected, _ = chat(cold, turn2)
        assert result.message.content == expected.message.content
    finally:
        cached.engine.close()
        cold.engine.close()


def test_untrimmable_caches_reuse_the_checkpoint_not_the_whole_entry(tokenizer):
    """Without the checkpoint, the hybrid model could only reuse an entry that the new
    prompt extends exactly: the rewritten turn would be a full miss."""
    model = build_hybrid(tokenizer)
    cache = PrefixCache(64 << 20)
    pipeline = pipeline_for(model, tokenizer, cache)
    try:
        assert pipeline.engine.source.checkpointing
        chat(pipeline, TURN1)
        assert len(cache) == 2  # the checkpoint at the user message's end + prompt/output
        turn2 = [
            *TURN1,
            {"role": "assistant", "content": "Other."},
            {"role": "user", "content": "Go"},
        ]
        result, _ = chat(pipeline, turn2)
        assert result.usage.cached_tokens == last_message_end(tokenizer, TURN1)
    finally:
        pipeline.engine.close()


def test_trimmable_caches_take_no_checkpoints(tokenizer):
    cache = PrefixCache(64 << 20)
    pipeline = pipeline_for(build_tiny_model(tokenizer, seed=1), tokenizer, cache)
    try:
        assert not pipeline.engine.source.checkpointing
        chat(pipeline, TURN1)
        assert len(cache) == 1
    finally:
        pipeline.engine.close()


def test_warm_up_prefills_the_system_prompt(model, tokenizer):
    pipeline = pipeline_for(model, tokenizer, PrefixCache(64 << 20))
    try:
        assert warm_up(pipeline, SYSTEM["content"]) == 0
        result, _ = chat(pipeline, TURN1)
        assert result.usage.cached_tokens >= last_message_end(tokenizer, [SYSTEM])
    finally:
        pipeline.engine.close()
