"""The Python API takes images as OpenAI-shaped content parts (a tiny vision model)."""

from __future__ import annotations

import pytest
from tiny_vision import png_data_url, tiny_vlm

from vllm_mlx import LLM
from vllm_mlx.request import RequestError


@pytest.fixture(scope="module")
def llm():
    with LLM(str(tiny_vlm("qwen2_5_vl")), max_tokens=4) as model:
        yield model


def user(*parts) -> list[dict]:
    return [{"role": "user", "content": list(parts)}]


def image(color) -> dict:
    return {"type": "image_url", "image_url": {"url": png_data_url(color), "detail": "auto"}}


QUESTION = {"type": "text", "text": "What is in this image?"}


def test_chat_reads_image_parts(llm):
    one = llm.chat(user(image((200, 0, 0)), QUESTION), temperature=0.0)
    two = llm.chat(user(image((200, 0, 0)), image((0, 0, 200)), QUESTION), temperature=0.0)
    # the tiny Qwen2.5-VL: a 64x48 image is a 2x2 merged grid between two markers
    assert two.usage.prompt_tokens - one.usage.prompt_tokens == 4 + 2
    streamed = "".join(
        e.delta.content or ""
        for e in llm.chat_stream(user(image((200, 0, 0)), QUESTION), temperature=0.0)
    )
    assert streamed == one.message.content


def test_bad_parts_and_images_are_refused(llm):
    with pytest.raises(ValueError, match="text or image_url"):
        llm.chat(user({"type": "input_audio"}))
    with pytest.raises(RequestError, match="scheme 'file'"):
        llm.chat(user({"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}))
