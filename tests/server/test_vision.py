"""Vision models through the real server and the official SDKs: every surface's image
shape counts the family's image tokens, images in Anthropic tool results, a vision request
batched with text requests, the second turn from the prefix cache, and every hostile image
refused in each API's error shape while the server keeps serving."""

from __future__ import annotations

import base64
import io
import random
import threading

import anthropic
import httpx
import openai
import pytest
from mlx_vlm.utils import load_processor
from PIL import Image
from servers import cli_server
from tiny_vision import FAMILIES, bomb_png, encoded, png_data_url, tiny_vlm

QUESTION = "What is in this image?"
QUESTION_PART = {"type": "text", "text": QUESTION}
RED, BLUE = (220, 30, 30), (20, 40, 230)
QWEN_IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"
IMAGE_TEXT = {
    "qwen2_5_vl": QWEN_IMAGE,
    "qwen3_vl": QWEN_IMAGE,
    "idefics3": "<image>",
    "gemma3": "<start_of_image>",
    "llava": "<image>",
    "mistral3": "[IMG]",
}


@pytest.fixture(scope="module", params=FAMILIES)
def family_server(request, tmp_path_factory):
    folder = tiny_vlm(request.param)
    log = tmp_path_factory.mktemp("vision") / "server.log"
    # three large images pass --max-images but not --max-image-tokens (9 tokens each for the
    # tiny Qwen2.5-VL's 84x84 cap, 16 for the tiny Qwen3-VL's 128x128, 20 for the tiny
    # Idefics3's five tiles, 4 for the tiny Gemma 3's and the tiny LLaVA's any image, at
    # most 2 x 2 for the tiny Mistral 3's 32-pixel longest edge)
    tokens = {
        "qwen2_5_vl": "20",
        "qwen3_vl": "40",
        "idefics3": "50",
        "gemma3": "10",
        "llava": "10",
        "mistral3": "10",
    }
    tokens = tokens[request.param]
    args = ("--max-images", "3", "--max-image-bytes", "60000", "--max-image-tokens", tokens)
    with cli_server(str(folder), *args, log_path=log) as base:
        yield request.param, base


def expansion(family: str, color=RED, size=(64, 48)) -> int:
    """The tokens the family's own processor makes of one image (markers included)."""
    processor = load_processor(tiny_vlm(family), add_detokenizer=False)
    image = Image.new("RGB", size, color)
    try:
        out = processor(text=[IMAGE_TEXT[family]], images=[image], add_special_tokens=False)
    except TypeError:  # LLaVA's hands its keywords to its image processor (no BOS added here)
        out = processor(text=[IMAGE_TEXT[family]], images=[image])
    return len(out["input_ids"][0].tolist())


def chat(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0, timeout=300)


def claude(base: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base, api_key="k", max_retries=0, timeout=300)


def image_part(color=RED, size=(64, 48)) -> dict:
    return {"type": "image_url", "image_url": {"url": png_data_url(color, size)}}


def prompt_tokens(base: str, content) -> int:
    reply = chat(base).chat.completions.create(
        model="m", messages=[{"role": "user", "content": content}], max_tokens=2, temperature=0
    )
    return reply.usage.prompt_tokens


def test_images_add_the_family_image_tokens(family_server):
    family, base = family_server
    per_image = expansion(family)
    if family in ("qwen2_5_vl", "qwen3_vl"):  # the 2x2-merged grid, between vision_start/end
        assert per_image == 4 + 2
    one = prompt_tokens(base, [image_part(), {"type": "text", "text": QUESTION}])
    two = prompt_tokens(base, [image_part(), image_part(BLUE), {"type": "text", "text": QUESTION}])
    assert two - one == per_image
    # without any image the template's layout may differ (Idefics3's "User: " / "User:<image>",
    # Gemma 3's blank lines around an image merging with the text's first token, LLaVA's
    # "USER: " split from the text's first word by the image)
    text = prompt_tokens(base, [QUESTION_PART])
    assert one - text - per_image in ((0,) if family in ("qwen2_5_vl", "qwen3_vl") else (0, 1))


def test_anthropic_image_in_a_tool_result_is_counted_and_read(family_server):
    family, base = family_server
    client = claude(base)
    png = base64.b64encode(encoded(RED, (64, 48), "PNG")).decode()
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}

    def conversation(result_content):
        return [
            {"role": "user", "content": "Take a screenshot."},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "shot", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": result_content}
                ],
            },
        ]

    tools = [{"name": "shot", "description": "screenshot", "input_schema": {"type": "object"}}]
    with_image = conversation([image])
    without = conversation([{"type": "text", "text": ""}])
    counted = client.messages.count_tokens(model="m", messages=with_image, tools=tools)
    plain = client.messages.count_tokens(model="m", messages=without, tools=tools)
    assert counted.input_tokens - plain.input_tokens == expansion(family)
    reply = client.messages.create(model="m", max_tokens=3, messages=with_image, tools=tools)
    usage = reply.usage  # Anthropic's input_tokens leave out what was read from the cache
    assert usage.input_tokens + usage.cache_read_input_tokens == counted.input_tokens
    top_level = [{"role": "user", "content": [image, {"type": "text", "text": QUESTION}]}]
    assert client.messages.create(model="m", max_tokens=2, messages=top_level).usage.input_tokens


def test_responses_input_image(family_server):
    family, base = family_server
    client = chat(base)

    def tokens(content):
        return client.responses.create(
            model="m", input=[{"role": "user", "content": content}], max_output_tokens=2
        ).usage.input_tokens

    image = {"type": "input_image", "image_url": png_data_url(RED), "detail": "auto"}
    question = {"type": "input_text", "text": QUESTION}
    assert tokens([image, image, question]) - tokens([image, question]) == expansion(family)


def test_models_say_which_take_images(family_server):
    _, base = family_server
    (model,) = httpx.get(f"{base}/v1/models").json()["data"]
    assert model["capabilities"]["vision"] is True


def test_second_turn_is_served_from_the_prefix_cache(family_server):
    family, base = family_server
    client = chat(base)
    first = [{"role": "user", "content": [image_part(BLUE), {"type": "text", "text": QUESTION}]}]
    answer = client.chat.completions.create(model="m", messages=first, max_tokens=4, temperature=0)
    second = [
        *first,
        {"role": "assistant", "content": answer.choices[0].message.content},
        {"role": "user", "content": "And its colour?"},
    ]
    reply = client.chat.completions.create(model="m", messages=second, max_tokens=4, temperature=0)
    assert reply.usage.prompt_tokens_details.cached_tokens > expansion(family)


def test_a_vision_request_batched_with_text_requests_answers_as_alone(family_server):
    _, base = family_server
    client = chat(base)
    requests = [
        [{"role": "user", "content": "Describe a terminal window with green text."}],
        [{"role": "user", "content": [image_part(RED), {"type": "text", "text": QUESTION}]}],
        [{"role": "user", "content": "Hello, world! How are you today?"}],
    ]

    def answer(messages):
        reply = client.chat.completions.create(
            model="m",
            messages=messages,
            max_tokens=12,
            temperature=0,
        )
        return reply.choices[0].message.content

    alone = [answer(m) for m in requests]
    together: list[str | None] = [None] * len(requests)

    def run(i):
        together[i] = answer(requests[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert together == alone


def _noise_png(size) -> str:
    rng = random.Random(0)
    image = Image.frombytes(
        "RGB", size, bytes(rng.getrandbits(8) for _ in range(size[0] * size[1] * 3))
    )
    return "data:image/png;base64," + base64.b64encode(_png(image)).decode()


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


HOSTILE = {
    "too many bytes": [{"type": "image_url", "image_url": {"url": _noise_png((200, 200))}}],
    "decompression bomb": [
        {
            "type": "image_url",
            "image_url": {
                "url": "data:image/png;base64," + base64.b64encode(bomb_png(60000, 60000)).decode()
            },
        }
    ],
    "too many images": [image_part(c) for c in (RED, BLUE, RED, BLUE)],
    "too many image tokens": [image_part(c, (300, 300)) for c in (RED, BLUE, RED)],
    "local file": [{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}],
    "network url (off by default)": [
        {"type": "image_url", "image_url": {"url": "http://127.0.0.1:1/a.png"}}
    ],
    "not base64": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}],
    "not an image": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8gd29ybGQ="}}
    ],
    "unsupported format": [
        {
            "type": "image_url",
            "image_url": {
                "url": "data:image/bmp;base64,"
                + base64.b64encode(encoded(RED, (8, 8), "BMP")).decode()
            },
        }
    ],
    "no url": [{"type": "image_url", "image_url": {}}],
}


def test_hostile_images_are_refused_in_each_api_shape_and_the_server_keeps_serving(
    family_server,
):
    family, base = family_server
    client, messages_client = chat(base), claude(base)
    for case, parts in HOSTILE.items():  # noqa: B007 (case names the failing one)
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": parts}], max_tokens=2
            )
        error = caught.value.body
        assert case and error["type"] == "invalid_request_error", (case, error)
        assert error["param"].startswith("messages"), (case, error)
        blocks = [_as_anthropic(p) for p in parts]
        with pytest.raises(anthropic.BadRequestError) as refused:
            messages_client.messages.create(
                model="m", max_tokens=2, messages=[{"role": "user", "content": blocks}]
            )
        assert refused.value.body["type"] == "error", case
        assert refused.value.body["error"]["type"] == "invalid_request_error", case
    assert prompt_tokens(base, [image_part(), {"type": "text", "text": QUESTION}]) > 0
    assert httpx.get(f"{base}/health").status_code == 200


def _as_anthropic(part: dict) -> dict:
    url = part["image_url"].get("url", "")
    if url.startswith("data:"):
        header, _, data = url.partition(",")
        media = header.removeprefix("data:").split(";")[0]
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url} if url else {}}
