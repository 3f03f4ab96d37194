"""Every constraint field on every surface, over real HTTP with the official SDKs, on a tiny
random-weight model that thinks (deepseek_r1: generation starts inside the reasoning block):
the reasoning stays free, the answer matches, streamed and not; malformed or doubled
constraints are 400s naming the field. The embedded model:
tests/constrained/test_structured_real.py."""

from __future__ import annotations

import json
import re

import anthropic
import openai
import pytest
from servers import tiny_model_server
from shared import HELLO

REGEX = r"(yes|no)-[0-9]{1,3}"
CHOICES = ["red", "green", "blue"]
GBNF = 'root ::= "(" [a-c] ("," [a-c])? ")"'
LARK = 'start: "(" /[a-c]/ ("," /[a-c]/)? ")"'
PAREN = re.compile(r"\([a-c](,[a-c])?\)")
SCHEMA = {
    "type": "object",
    "properties": {"k": {"enum": ["x", "y"]}, "n": {"type": "boolean"}},
    "required": ["k", "n"],
    "additionalProperties": False,
}


def is_schema_value(text: str) -> bool:
    value = json.loads(text)
    return set(value) == {"k", "n"} and value["k"] in ("x", "y") and isinstance(value["n"], bool)


# (extra body fields, does the answer match)
FIELDS = [
    ({"guided_regex": REGEX}, lambda t: re.fullmatch(REGEX, t)),
    ({"regex": REGEX}, lambda t: re.fullmatch(REGEX, t)),
    ({"structured_outputs": {"regex": REGEX}}, lambda t: re.fullmatch(REGEX, t)),
    ({"guided_choice": CHOICES}, lambda t: t in CHOICES),
    ({"structured_outputs": {"choice": CHOICES}}, lambda t: t in CHOICES),
    ({"guided_grammar": GBNF}, PAREN.fullmatch),
    ({"ebnf": GBNF}, PAREN.fullmatch),
    ({"grammar": GBNF}, PAREN.fullmatch),
    ({"structured_outputs": {"grammar": LARK}}, PAREN.fullmatch),
    ({"guided_json": SCHEMA}, is_schema_value),
    ({"json_schema": SCHEMA}, is_schema_value),
    ({"structured_outputs": {"json": SCHEMA}}, is_schema_value),
    (
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "s", "schema": SCHEMA},
            }
        },
        is_schema_value,
    ),
]
IDS = [
    next(iter(f)) + ("." + next(iter(f[next(iter(f))])) if "structured" in next(iter(f)) else "")
    for f, _ in FIELDS
]


@pytest.fixture(scope="module")
def tiny():
    with tiny_model_server() as (base, tokenizer):
        yield base


@pytest.fixture(scope="module")
def client(tiny):
    return openai.OpenAI(base_url=f"{tiny}/v1", api_key="k", max_retries=0)


def chat(client, extra, stream):
    body = {**extra, "thinking_token_budget": 4}
    kwargs = dict(model="m", messages=HELLO, max_tokens=80, temperature=1.0, seed=3)
    if not stream:
        reply = client.chat.completions.create(**kwargs, extra_body=body)
        message = reply.choices[0].message
        return message.reasoning_content, message.content, reply.choices[0].finish_reason
    reasoning, content, finish = "", "", None
    for chunk in client.chat.completions.create(**kwargs, stream=True, extra_body=body):
        if chunk.choices:
            delta = chunk.choices[0].delta
            reasoning += getattr(delta, "reasoning_content", None) or ""
            content += delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    return reasoning, content, finish


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("extra", "matches"), FIELDS, ids=IDS)
def test_chat_field_constrains_the_answer_not_the_reasoning(client, extra, matches, stream):
    reasoning, content, finish = chat(client, extra, stream)
    assert reasoning  # free: random text from a random model
    assert finish == "stop" and matches(content), content


@pytest.mark.parametrize("stream", [False, True])
def test_completions_take_the_same_fields(client, stream):
    kwargs = dict(model="m", prompt="Answer:", max_tokens=40, temperature=1.0, seed=1)
    body = {"structured_outputs": {"choice": CHOICES}}
    if stream:
        text = "".join(
            c.choices[0].text
            for c in client.completions.create(**kwargs, stream=True, extra_body=body)
            if c.choices
        )
    else:
        text = client.completions.create(**kwargs, extra_body=body).choices[0].text
    assert text in CHOICES
    text = client.completions.create(**kwargs, extra_body={"guided_regex": REGEX}).choices[0].text
    assert re.fullmatch(REGEX, text)


@pytest.mark.parametrize(
    ("extra", "param", "message"),
    [
        ({"guided_regex": "a+", "guided_choice": ["a"]}, "guided_choice", "guided_regex"),
        (
            {"response_format": {"type": "json_object"}, "regex": "a"},
            "regex",
            "response_format",
        ),
        ({"structured_outputs": {"regexp": "a"}}, "structured_outputs.regexp", "unknown key"),
        (
            {"structured_outputs": {"regex": "a", "choice": ["a"]}},
            "structured_outputs.choice",
            "one",
        ),
        ({"guided_regex": "[0-9"}, "guided_regex", "regex"),
        ({"grammar": "root ::= ("}, "grammar", "gbnf"),
        ({"guided_choice": []}, "guided_choice", "non-empty"),
        (
            {"structured_outputs": {"structural_tag": "{}"}},
            "structured_outputs.structural_tag",
            "structural_tag",
        ),
        ({"response_format": {"type": "xml"}}, "response_format.type", "xml"),
    ],
)
def test_bad_constraints_are_400s_naming_the_field(client, extra, param, message):
    for call in (
        lambda: client.chat.completions.create(
            model="m", messages=HELLO, max_tokens=5, extra_body=extra
        ),
        lambda: client.completions.create(model="m", prompt="x", max_tokens=5, extra_body=extra),
    ):
        with pytest.raises(openai.BadRequestError) as info:
            call()
        error = info.value.body
        assert error["param"] == param and message in error["message"], error


def test_anthropic_output_format(tiny):
    client = anthropic.Anthropic(base_url=tiny, api_key="k", max_retries=0)
    reply = client.messages.create(
        model="m",
        max_tokens=80,
        messages=HELLO,
        thinking={"type": "enabled", "budget_tokens": 4},
        extra_body={"output_format": {"type": "json_schema", "schema": SCHEMA}},
    )
    kinds = [block.type for block in reply.content]
    assert "thinking" in kinds
    assert is_schema_value("".join(b.text for b in reply.content if b.type == "text"))
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(
            model="m", max_tokens=5, messages=HELLO, extra_body={"output_format": {"type": "x"}}
        )
    assert "output_format" in str(info.value)


@pytest.mark.parametrize(
    ("fmt", "matches"),
    [
        ({"type": "json_schema", "name": "s", "schema": SCHEMA}, is_schema_value),
        (
            {"type": "grammar", "syntax": "regex", "definition": REGEX},
            lambda t: re.fullmatch(REGEX, t),
        ),
        ({"type": "grammar", "syntax": "lark", "definition": LARK}, PAREN.fullmatch),
    ],
)
def test_responses_text_format(client, fmt, matches):
    reply = client.responses.create(
        model="m",
        input="hi",
        max_output_tokens=80,
        reasoning={"effort": "none"},
        text={"format": fmt},
    )
    assert matches(reply.output_text), reply.output_text


def test_responses_bad_grammar_names_text_format(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(
            model="m",
            input="hi",
            max_output_tokens=5,
            text={"format": {"type": "grammar", "syntax": "regex", "definition": "[0-"}},
        )
    assert info.value.body["param"].startswith("text.format"), info.value.body
