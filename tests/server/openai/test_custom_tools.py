"""OpenAI custom tools on /v1/chat/completions through the official SDK's typed params,
over real HTTP: a forced call on a thinking random-weight model keeps its reasoning free and
writes an input in the tool's Lark or regex grammar (streamed and not; a random model would
write garbage otherwise); an unforced call is checked against the grammar and a mismatch is
reported; custom calls and tool results in the history reach the prompt; bad custom tools
are 400s naming the field."""

from __future__ import annotations

import json
import re

import openai
import pytest
from openai.types.chat import (
    ChatCompletionCustomToolParam,
    ChatCompletionNamedToolChoiceCustomParam,
)
from servers import replay_server, tiny_echo_server, tiny_model_server
from shared import HELLO

LARK = 'start: "(" /[a-c]/ ("," /[a-c]/)? ")"'
REGEX = r"(yes|no)-[0-9]{1,3}"
MATCHES = {"lark": re.compile(r"\([a-c](,[a-c])?\)"), "regex": re.compile(REGEX)}
DEFINITIONS = {"lark": LARK, "regex": REGEX}
PATCH = '*** Begin Patch\n*** Add File: "a.txt"\n+hi\n*** End Patch'


def custom_tool(name: str, syntax: str | None = None) -> ChatCompletionCustomToolParam:
    if syntax is None:
        return ChatCompletionCustomToolParam(
            type="custom", custom={"name": name, "format": {"type": "text"}}
        )
    grammar = {"syntax": syntax, "definition": DEFINITIONS[syntax]}
    return ChatCompletionCustomToolParam(
        type="custom",
        custom={
            "name": name,
            "description": "Pick one.",
            "format": {"type": "grammar", "grammar": grammar},
        },
    )


def named(name: str) -> ChatCompletionNamedToolChoiceCustomParam:
    return ChatCompletionNamedToolChoiceCustomParam(type="custom", custom={"name": name})


@pytest.fixture(scope="module")
def client():
    with tiny_model_server() as (base, _):
        yield openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0)


def call(client, tools, tool_choice, stream, seed=3):
    """(reasoning, [(type, name, input)], finish_reason, constraint_gave_up)."""
    kwargs = dict(
        model="m",
        messages=HELLO,
        tools=tools,
        tool_choice=tool_choice,
        max_tokens=80,
        temperature=1.0,
        seed=seed,
        extra_body={"thinking_token_budget": 4},
    )
    if not stream:
        reply = client.chat.completions.create(**kwargs)
        choice = reply.choices[0]
        calls = [
            (c.type, c.custom.name, c.custom.input) if c.type == "custom" else (c.type, None, None)
            for c in choice.message.tool_calls or []
        ]
        gave_up = (reply.model_extra or {}).get("constraint_gave_up")
        return choice.message.reasoning_content, calls, choice.finish_reason, gave_up
    reasoning, calls, finish, gave_up = "", {}, None, None
    for chunk in client.chat.completions.create(**kwargs, stream=True):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        reasoning += getattr(delta, "reasoning_content", None) or ""
        for piece in delta.tool_calls or []:
            custom = (piece.model_extra or {}).get("custom") or {}
            entry = calls.setdefault(piece.index, [piece.type, custom.get("name"), ""])
            entry[2] += custom.get("input", "")
        finish = chunk.choices[0].finish_reason or finish
        gave_up = (chunk.model_extra or {}).get("constraint_gave_up") or gave_up
    return reasoning, [tuple(c) for c in calls.values()], finish, gave_up


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("syntax", ["lark", "regex"])
@pytest.mark.parametrize("choice", ["named", "required"])
def test_forced_custom_call_writes_its_grammar(client, syntax, choice, stream):
    tools = [custom_tool("pick", syntax)]
    tool_choice = named("pick") if choice == "named" else "required"
    reasoning, calls, finish, gave_up = call(client, tools, tool_choice, stream)
    assert reasoning  # free: random text
    ((kind, name, text),) = calls
    assert (kind, name) == ("custom", "pick")
    assert MATCHES[syntax].fullmatch(text), text
    assert finish == "tool_calls" and gave_up is None


@pytest.mark.mac_path
@pytest.mark.parametrize("stream", [False, True])
def test_forced_text_tool_among_others_is_a_family_call(client, stream):
    """Without a grammar the call is forced in the family's syntax (hermes here), its input
    a free string (which a random model may not close within the limit); the grammar tool
    beside it is offered, not chosen."""
    tools = [custom_tool("note"), custom_tool("pick", "regex")]
    _, calls, finish, _ = call(client, tools, named("note"), stream)
    ((kind, name, text),) = calls
    assert (kind, name) == ("custom", "note") and isinstance(text, str)
    assert finish in ("tool_calls", "length")


def hermes(name: str, text: str) -> str:
    arguments = {"input": text}
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("text", "matches"), [("no-12", True), ("perhaps", False)])
def test_unforced_call_is_checked_against_its_grammar(text, matches, stream):
    with replay_server(hermes("pick", text), tool_call_parser="hermes") as (base, _):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0)
        _, calls, finish, gave_up = call(client, [custom_tool("pick", "regex")], "auto", stream)
    assert calls == [("custom", "pick", text)] and finish == "tool_calls"
    if matches:
        assert gave_up is None
    else:  # the call is returned as the model wrote it, and the mismatch is said
        assert gave_up.startswith("tools.0.custom.format.grammar.definition (pick)"), gave_up


def test_custom_calls_and_tool_results_in_history_reach_the_prompt():
    with tiny_echo_server() as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0)
        reply = client.chat.completions.create(
            model="m",
            tools=[custom_tool("apply_patch")],
            messages=[
                {"role": "user", "content": "Add a file."},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "custom",
                            "custom": {"name": "apply_patch", "input": PATCH},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "Done, file added."},
            ],
            max_tokens=2000,
        )
    prompt = reply.choices[0].message.content
    # the call as the function the model saw (its arguments an object)
    assert json.dumps({"input": PATCH}) in prompt
    assert "Done, file added." in prompt and "apply_patch" in prompt


def grammar_tool(syntax: str, definition: str) -> dict:
    grammar = {"syntax": syntax, "definition": definition}
    return {
        "type": "custom",
        "custom": {"name": "p", "format": {"type": "grammar", "grammar": grammar}},
    }


GRAMMAR = "tools.0.custom.format.grammar"
BAD = [
    ([grammar_tool("lark", "start: (")], {}, f"{GRAMMAR}.definition"),
    ([grammar_tool("regex", "[0-")], {}, f"{GRAMMAR}.definition"),
    ([grammar_tool("ebnf", "a")], {}, f"{GRAMMAR}.syntax"),
    ([grammar_tool("regex", "")], {}, f"{GRAMMAR}.definition"),
    (
        [{"type": "custom", "custom": {"name": "p", "format": {"type": "json"}}}],
        {},
        "tools.0.custom.format.type",
    ),
    ([{"type": "custom"}], {}, "tools.0"),
    ([custom_tool("p")], {"tool_choice": named("q")}, "tool_choice"),
    ([custom_tool("p"), {"type": "function", "function": {"name": "p"}}], {}, "tools.1"),
    (
        [grammar_tool("regex", REGEX)],
        {"tool_choice": named("p"), "extra_body": {"guided_regex": "a+"}},
        "guided_regex",
    ),
]


@pytest.mark.parametrize(
    ("tools", "more", "param"), BAD, ids=[b[2] + str(i) for i, b in enumerate(BAD)]
)
def test_bad_custom_tools_are_400s_naming_the_field(client, tools, more, param):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="m", messages=HELLO, tools=tools, max_tokens=4, **more)
    assert info.value.body["param"] == param, info.value.body


def test_custom_call_in_history_needs_its_body(client):
    messages = [*HELLO, {"role": "assistant", "tool_calls": [{"id": "c", "type": "custom"}]}]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="m", messages=messages, max_tokens=4)
    assert info.value.body["param"].startswith("messages.1.tool_calls.0"), info.value.body
