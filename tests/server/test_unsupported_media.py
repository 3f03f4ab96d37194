"""Images, documents and audio on a text-only model: each part becomes a short placeholder in
the prompt, in user turns and in tool results, on all three APIs (the echo server answers
with the rendered prompt, so the test reads what the model saw); ``--unsupported-media
reject`` makes the same requests a 400 in each API's shape naming the part."""

from __future__ import annotations

import anthropic
import openai
import pytest
from servers import echo_server

PNG = "iVBORw0KGgo="
IMAGE = "[image omitted: this model reads text only]"
DOCUMENT = "[document omitted: this model reads text only]"
AUDIO = "[audio omitted: this model reads text only]"
FILE = "[file omitted: this model reads text only]"

ANTHROPIC_MESSAGES = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "Look: "},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
            {
                "type": "document",
                "source": {"type": "text", "media_type": "text/plain", "data": "x"},
            },
        ],
    },
    {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"f": "a"}}],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                    }
                ],
            }
        ],
    },
]
CHAT_MESSAGES = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "Look: "},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            {"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}},
            {"type": "file", "file": {"file_data": "AA==", "filename": "a.pdf"}},
        ],
    }
]
RESPONSES_INPUT = [
    {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "Look: "},
            {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},
        ],
    },
    {"type": "function_call", "call_id": "c1", "name": "view_image", "arguments": "{}"},
    {
        "type": "function_call_output",
        "call_id": "c1",
        "output": [{"type": "input_file", "file_data": "AA==", "filename": "a.pdf"}],
    },
]


@pytest.fixture(scope="module")
def echo():
    with echo_server() as (base, runtime):
        yield base, runtime


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_placeholders(echo, stream):
    client = anthropic.Anthropic(base_url=echo[0], api_key="k", max_retries=0)
    kwargs = dict(model="m", max_tokens=2000, messages=ANTHROPIC_MESSAGES)
    if stream:
        with client.messages.stream(**kwargs) as events:
            text = events.get_final_text()
    else:
        text = client.messages.create(**kwargs).content[0].text
    assert f"Look: {IMAGE}{DOCUMENT}" in text
    assert text.count(IMAGE) == 2  # the user's and the one inside the tool result


@pytest.mark.parametrize("stream", [False, True])
def test_chat_placeholders(echo, stream):
    client = openai.OpenAI(base_url=f"{echo[0]}/v1", api_key="k", max_retries=0)
    reply = client.chat.completions.create(model="m", messages=CHAT_MESSAGES, stream=stream)
    text = (
        "".join(c.choices[0].delta.content or "" for c in reply if c.choices)
        if stream
        else (reply.choices[0].message.content)
    )
    assert f"Look: {IMAGE}{AUDIO}{FILE}" in text


@pytest.mark.parametrize("stream", [False, True])
def test_responses_placeholders(echo, stream):
    client = openai.OpenAI(base_url=f"{echo[0]}/v1", api_key="k", max_retries=0)
    if stream:
        with client.responses.stream(model="m", input=RESPONSES_INPUT) as events:
            text = events.get_final_response().output_text
    else:
        text = client.responses.create(model="m", input=RESPONSES_INPUT).output_text
    assert f"Look: {IMAGE}" in text and FILE in text


def test_reject_is_a_400_naming_the_part(echo):
    base, runtime = echo
    runtime.pipeline.options = runtime.pipeline.options.updated(unsupported_media="reject")
    try:
        oa = openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0)
        with pytest.raises(openai.BadRequestError) as chat:
            oa.chat.completions.create(model="m", messages=CHAT_MESSAGES)
        assert chat.value.body["param"] == "messages.0.content.1"
        with pytest.raises(openai.BadRequestError) as responses:
            oa.responses.create(model="m", input=RESPONSES_INPUT, stream=True)
        assert responses.value.body["param"] == "input.0.content.1"
        claude = anthropic.Anthropic(base_url=base, api_key="k", max_retries=0)
        with pytest.raises(anthropic.BadRequestError) as messages:
            claude.messages.create(model="m", max_tokens=10, messages=ANTHROPIC_MESSAGES)
        error = messages.value.body["error"]
        assert error["type"] == "invalid_request_error" and "text only" in error["message"]
    finally:
        runtime.pipeline.options = runtime.pipeline.options.updated(unsupported_media="placeholder")
