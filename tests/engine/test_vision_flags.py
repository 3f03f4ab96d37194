"""Vision models with the engine's options: a draft model speculates their text, quantized
KV caches hold their images' KV (families without M-RoPE), and what cannot work is refused
at start with a message that says why."""

from __future__ import annotations

import pytest
from tiny_vision import tiny_vlm
from vision_chats import Img, request, run_alone, together, user

from vllm_mlx.options import RuntimeOptions
from vllm_mlx.runtime import build_runtime

GREEN = (10, 200, 40)
CHATS = (
    (("Describe a terminal window.",), 12),
    ((Img(GREEN), "What is in this image?"), 10),
)


def _chats():
    return [request(user(*parts), max_tokens=n) for parts, n in CHATS]


def _answers(options: RuntimeOptions, family: str) -> tuple[list[str], list[str], object]:
    """(each chat alone, the chats together) on a runtime with ``options``; and its source."""
    runtime = build_runtime(str(tiny_vlm(family)), options, progress=False)
    try:
        alone = [run_alone(runtime, chat) for chat in _chats()]
        batched, _ = together(runtime, _chats())
        return alone, batched, runtime.engine.source
    finally:
        runtime.close()


def test_a_draft_model_speculates_a_vision_models_text():
    """The target itself as its draft (every drafted token accepted): text requests are
    speculated, the vision request decodes in the batch, and every answer is the one the
    model gives without a draft, alone and together."""
    family = "qwen3_vl"
    plain, _, _ = _answers(RuntimeOptions.of(prefix_cache_mb=0), family)
    options = RuntimeOptions.of(prefix_cache_mb=0, draft_model=str(tiny_vlm(family)))
    alone, together, source = _answers(options, family)
    assert alone == plain and together == plain
    assert source._drafted > 0 and source._accepted > 0


def test_quantized_kv_holds_a_vision_requests_images():
    """--kv-bits 8 on a family with plain rotary positions: the image request and a text
    request batched answer as alone, and the image's KV is cached for the next turn."""
    options = RuntimeOptions.of(kv_bits=8, kv_group_size=32)
    runtime = build_runtime(str(tiny_vlm("idefics3")), options, progress=False)
    try:
        alone = [run_alone(runtime, chat) for chat in _chats()]
        batched, peak = together(runtime, _chats())
        assert batched == alone and peak >= 2
        turns = (
            user(Img(GREEN), "What is in this image?"),
            ("assistant", [alone[1]]),
            user("And its colour?"),
        )
        prepared = runtime.pipeline.prepare_chat(request(*turns))
        result = runtime.pipeline.complete_sync(prepared)
        assert result.usage.cached_tokens >= prepared.generation.vision.image_end
    finally:
        runtime.close()


@pytest.mark.parametrize(
    ("family", "says"),
    [("qwen2_5_vl", "M-RoPE"), ("gemma3", "RotatingKVCache")],
)
def test_kv_bits_is_refused_at_start_where_it_cannot_work(family, says):
    with pytest.raises(ValueError, match=says):
        build_runtime(
            str(tiny_vlm(family)), RuntimeOptions.of(kv_bits=8, kv_group_size=32), progress=False
        )
