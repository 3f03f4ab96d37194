"""OpenAI custom tools on /v1/responses through the official SDK's typed params, over real
HTTP: a forced call on a random-weight model writes an input in the tool's Lark or regex
grammar as a ``custom_tool_call`` item (streamed: ``response.custom_tool_call_input.delta``
events that add up to the ``.done`` input, as OpenAI sends them); an unforced call is
checked against the grammar; custom calls and their outputs in the input reach the prompt;
bad custom tools are 400s naming the field."""

from __future__ import annotations

import json
import re

import openai
import pytest
from openai.types.responses import CustomToolParam, ToolChoiceCustomParam
from servers import replay_server, tiny_echo_server, tiny_model_server

LARK = 'start: "(" /[a-c]/ ("," /[a-c]/)? ")"'
REGEX = r"(yes|no)-[0-9]{1,3}"
MATCHES = {"lark": re.compile(r"\([a-c](,[a-c])?\)"), "regex": re.compile(REGEX)}
DEFINITIONS = {"lark": LARK, "regex": REGEX}
PATCH = '*** Begin Patch\n*** Add File: "a.txt"\n+hi\n*** End Patch'


def custom_tool(
    name: str, syntax: str | None = None, definition: str | None = None
) -> CustomToolParam:
    if syntax is None:
        return CustomToolParam(type="custom", name=name, format={"type": "text"})
    return CustomToolParam(
        type="custom",
        name=name,
        description="Pick one.",
        format={
            "type": "grammar",
            "syntax": syntax,  # type: ignore[typeddict-item]
            "definition": definition or DEFINITIONS[syntax],
        },
    )


@pytest.fixture(scope="module")
def client():
    with tiny_model_server() as (base, _):
        yield openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0)


def respond(client, tools, tool_choice, stream, **more):
    """(the final response, the custom input events' (type, delta or input) when streamed)."""
    kwargs = dict(
        model="m",
        input="Hello",
        tools=tools,
        tool_choice=tool_choice,
        max_output_tokens=60,
        temperature=1.0,
        reasoning={"effort": "none"},
        **more,
    )
    if not stream:
        return client.responses.create(**kwargs), []
    with client.responses.stream(**kwargs) as events:
        seen = [e for e in events if e.type.startswith("response.custom_tool_call_input")]
        return events.get_final_response(), seen


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("syntax", ["lark", "regex"])
@pytest.mark.parametrize("choice", ["named", "required"])
def test_forced_custom_call_writes_its_grammar(client, syntax, choice, stream):
    tool_choice = (
        ToolChoiceCustomParam(type="custom", name="pick") if choice == "named" else "required"
    )
    final, events = respond(client, [custom_tool("pick", syntax)], tool_choice, stream)
    assert final.status == "completed"
    (item,) = final.output
    assert item.type == "custom_tool_call" and item.name == "pick" and item.call_id
    assert MATCHES[syntax].fullmatch(item.input), item.input
    if stream:
        *deltas, done = events
        assert deltas and all(e.type == "response.custom_tool_call_input.delta" for e in deltas)
        assert done.type == "response.custom_tool_call_input.done" and done.input == item.input
        assert "".join(e.delta for e in deltas) == item.input
        assert {e.item_id for e in events} == {item.id}


@pytest.mark.parametrize(("text", "matches"), [("yes-7", True), ("perhaps", False)])
def test_unforced_call_is_checked_against_its_grammar(text, matches):
    call = json.dumps({"name": "pick", "arguments": {"input": text}})
    with replay_server(f"<tool_call>\n{call}\n</tool_call>", tool_call_parser="hermes") as (
        base,
        _,
    ):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0)
        final, events = respond(client, [custom_tool("pick", "regex")], "auto", True)
    (item,) = final.output
    assert item.type == "custom_tool_call" and item.input == text
    assert "".join(e.delta for e in events[:-1]) == text == events[-1].input
    gave_up = (final.model_extra or {}).get("constraint_gave_up")
    if matches:
        assert gave_up is None
    else:
        assert gave_up.startswith("tools.0.format.definition (pick)"), gave_up


def test_custom_call_and_output_in_input_reach_the_prompt():
    with tiny_echo_server() as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0)
        reply = client.responses.create(
            model="m",
            tools=[custom_tool("apply_patch")],
            input=[
                {"role": "user", "content": "Add a file."},
                {
                    "type": "custom_tool_call",
                    "call_id": "call_1",
                    "name": "apply_patch",
                    "input": PATCH,
                },
                {
                    "type": "custom_tool_call_output",
                    "call_id": "call_1",
                    "output": "Done, file added.",
                },
            ],
            max_output_tokens=2000,
        )
    prompt = reply.output_text
    assert json.dumps({"input": PATCH}) in prompt  # as the function it is
    assert "Done, file added." in prompt
    assert reply.tools and reply.tools[0].type == "custom"  # echoed


BAD = [
    ([custom_tool("p", "lark", "start: (")], {}, "tools.0.format.definition"),
    ([custom_tool("p", "regex", "[0-")], {}, "tools.0.format.definition"),
    ([custom_tool("p", "ebnf", "a")], {}, "tools.0.format.syntax"),
    (
        [{"type": "custom", "name": "p", "format": {"type": "grammar", "syntax": "regex"}}],
        {},
        "tools.0.format.definition",
    ),
    ([{"type": "custom", "name": "p", "format": {"type": "json"}}], {}, "tools.0.format.type"),
    ([custom_tool("p")], {"tool_choice": {"type": "custom", "name": "q"}}, "tool_choice"),
    ([custom_tool("p"), {"type": "function", "name": "p", "parameters": {}}], {}, "tools.1.name"),
    (
        [custom_tool("p", "regex")],
        {
            "tool_choice": {"type": "custom", "name": "p"},
            "text": {"format": {"type": "json_object"}},
        },
        "text.format",
    ),
]


@pytest.mark.parametrize(
    ("tools", "more", "param"), BAD, ids=[f"{i}-{b[2]}" for i, b in enumerate(BAD)]
)
def test_bad_custom_tools_are_400s_naming_the_field(client, tools, more, param):
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="m", input="Hello", tools=tools, max_output_tokens=4, **more)
    assert info.value.body["param"] == param, info.value.body
