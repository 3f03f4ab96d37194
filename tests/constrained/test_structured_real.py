"""Constraint fields on the embedded model (SmolLM2, real server over HTTP, official SDK):
chat and completions, streamed and not; short answers so each request stays a few tokens."""

from __future__ import annotations

import json
import re

import pytest

pytestmark = pytest.mark.slow

QUESTION = [{"role": "user", "content": "Is the sky blue? Answer yes or no."}]


@pytest.mark.mac_path
def test_chat_choice_not_streamed(openai_client):
    reply = openai_client.chat.completions.create(
        model="smollm2",
        messages=QUESTION,
        max_tokens=8,
        temperature=0,
        extra_body={"structured_outputs": {"choice": ["yes", "no"]}},
    )
    assert reply.choices[0].message.content in ("yes", "no")
    assert reply.choices[0].finish_reason == "stop"


@pytest.mark.mac_path
def test_chat_regex_streamed(openai_client):
    text = ""
    for chunk in openai_client.chat.completions.create(
        model="smollm2",
        messages=QUESTION,
        max_tokens=8,
        temperature=0,
        stream=True,
        extra_body={"guided_regex": r"(Yes|No), [a-z]{1,8}\."},
    ):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
    assert re.fullmatch(r"(Yes|No), [a-z]{1,8}\.", text), text


def test_completions_json_schema_and_gbnf(openai_client):
    schema = {
        "type": "object",
        "properties": {"answer": {"enum": ["yes", "no"]}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    reply = openai_client.completions.create(
        model="smollm2",
        prompt="Q: Is the sky blue?\nA (JSON):",
        max_tokens=16,
        temperature=0,
        extra_body={"json_schema": schema},
    )
    assert json.loads(reply.choices[0].text)["answer"] in ("yes", "no")
    text = "".join(
        c.choices[0].text
        for c in openai_client.completions.create(
            model="smollm2",
            prompt="Q: Is the sky blue?\nA:",
            max_tokens=6,
            temperature=0,
            stream=True,
            extra_body={"grammar": 'root ::= ("yes" | "no") "."'},
        )
        if c.choices
    )
    assert text in ("yes.", "no.")
