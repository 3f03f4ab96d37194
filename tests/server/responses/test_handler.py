"""/v1/responses and GET /v1/responses/{id} through real HTTP with the official openai SDK:
the real default model for answers, chains, truncation and errors; the replay runtime for
controlled reasoning and function-call output and for a fault injected mid-stream; a tiny
think-token model for reasoning.effort."""

from __future__ import annotations

import json
from contextlib import contextmanager

import httpx
import openai
import pytest
from comparing import comparable_response
from servers import FailingSource, replay_server, tiny_model_server
from shared import WEATHER_RESPONSES

from vllm_mlx.server.responses.store import ResponseStore, StoredResponse

slow = pytest.mark.slow  # the real default model
QUESTION = "What is the capital of France?"
REPLY = (
    "<think>Weather needs a tool.</think>Let me check.<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>'
)


def create_and_stream(client, **kwargs):
    whole = client.responses.create(**kwargs)
    with client.responses.stream(**kwargs) as stream:
        events = list(stream)
    return whole, events


@contextmanager
def replay_client(text: str, **parsers):
    with replay_server(text, **parsers) as (base, runtime):
        yield openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0), runtime


def test_store_is_bounded_lru():
    store = ResponseStore(max_entries=2)
    for name in ("a", "b"):
        store.put(name, StoredResponse({"id": name}, []))
    assert store.get("a") is not None  # "a" is now the most recently used
    store.put("c", StoredResponse({"id": "c"}, []))
    assert store.get("b") is None and store.get("a") and store.get("c") and len(store) == 2


# -- the real default model --------------------------------------------------------------


@slow
def test_create_and_stream_agree(openai_client):
    kwargs = dict(model="gpt-5-codex", input=QUESTION, temperature=0, max_output_tokens=12)
    whole, events = create_and_stream(openai_client, **kwargs)
    assert whole.model == "smollm2" and whole.status == "completed"
    assert "Paris" in whole.output_text
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed" and types.count("response.completed") == 1
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert comparable_response(events[-1].response) == comparable_response(whole)
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text


@slow
def test_previous_response_id_chain_and_retrieve(openai_client):
    first = openai_client.responses.create(
        model="m",
        input=QUESTION,
        temperature=0,
        max_output_tokens=12,
        instructions="Answer briefly.",
    )
    assert openai_client.responses.retrieve(first.id).output_text == first.output_text
    second = openai_client.responses.create(
        model="m",
        input="And of Italy?",
        previous_response_id=first.id,
        temperature=0,
        max_output_tokens=12,
    )
    alone = openai_client.responses.create(
        model="m", input="And of Italy?", temperature=0, max_output_tokens=1
    )
    # the chain carries the first exchange: the prompt holds the question and its answer
    assert second.previous_response_id == first.id
    assert second.usage.input_tokens > alone.usage.input_tokens + 10
    third = openai_client.responses.create(
        model="m",
        input="Thanks.",
        previous_response_id=second.id,
        temperature=0,
        max_output_tokens=1,
        store=False,
    )
    assert third.usage.input_tokens > second.usage.input_tokens
    with pytest.raises(openai.NotFoundError):
        openai_client.responses.retrieve(third.id)


@slow
def test_max_output_tokens_truncation_in_both_modes(openai_client):
    whole, events = create_and_stream(
        openai_client, model="m", input=QUESTION, temperature=0, max_output_tokens=3
    )
    for response in (whole, events[-1].response):
        assert response.status == "incomplete"
        assert response.incomplete_details.reason == "max_output_tokens"
        assert response.usage.output_tokens == 3
    assert events[-1].type == "response.incomplete"
    assert comparable_response(events[-1].response) == comparable_response(whole)


BAD_REQUESTS = [
    ("bad role", {"input": [{"role": "wizard", "content": "hi"}]}, 400, "input.0.role"),
    (
        "unknown previous id",
        {"input": "hi", "previous_response_id": "resp_nope"},
        404,
        "previous_response_id",
    ),
    (
        "bad schema",
        {
            "input": "hi",
            "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "wizard"}}},
        },
        400,
        "text.format",
    ),
    (
        "unknown effort",
        {"input": "hi", "reasoning": {"effort": "extreme"}},
        400,
        "reasoning.effort",
    ),
    ("tool_choice without tools", {"input": "hi", "tool_choice": "required"}, 400, "tool_choice"),
]


@slow
@pytest.mark.parametrize("name,change,status,param", BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
def test_bad_requests_get_openai_error_shape(real_server, name, change, status, param):
    body = {"model": "m", "max_output_tokens": 5, **change}
    reply = httpx.post(f"{real_server}/v1/responses", json=body, timeout=60)
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["param"] == param


@slow
def test_codex_request_shape_is_accepted(real_server):
    """Stateless, developer role, include/prompt_cache_key/client_metadata, hosted tools."""
    body = {
        "model": "gpt-5-codex",
        "instructions": "You are a coding agent.",
        "input": [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "Be brief."}],
            },
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": QUESTION}],
            },
        ],
        "tools": [WEATHER_RESPONSES, {"type": "web_search"}, {"type": "namespace", "name": "x"}],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "abc",
        "client_metadata": {"x": "y"},
        "max_output_tokens": 4,
    }
    with httpx.stream("POST", f"{real_server}/v1/responses", json=body, timeout=300) as raw:
        assert raw.status_code == 200
        data = [json.loads(line[6:]) for line in raw.iter_lines() if line.startswith("data: ")]
    assert data[-1]["type"] in ("response.completed", "response.incomplete")
    assert [t["name"] for t in data[-1]["response"]["tools"]] == ["get_weather"]


# -- controlled output (replay) ----------------------------------------------------------


def test_reasoning_and_function_call_stream_incrementally_and_match():
    with replay_client(REPLY, tool_call_parser="hermes", reasoning_parser="qwen3") as (client, _):
        whole, events = create_and_stream(
            client, model="m", input="Weather in Paris?", tools=[WEATHER_RESPONSES]
        )
        output = [
            {"type": "function_call_output", "call_id": whole.output[2].call_id, "output": "sunny"}
        ]
        follow = client.responses.create(model="m", previous_response_id=whole.id, input=output)
        alone = client.responses.create(model="m", input=output)
    assert [item.type for item in whole.output] == ["reasoning", "message", "function_call"]
    assert whole.output[0].content[0].text == "Weather needs a tool."
    assert whole.output_text == "Let me check."
    call = whole.output[2]
    assert call.name == "get_weather" and call.call_id.startswith("call_")
    assert json.loads(call.arguments) == {"city": "Paris", "days": 3}
    assert comparable_response(events[-1].response) == comparable_response(whole)
    pieces = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(pieces) > 3, "arguments must stream as they are parsed, not as one blob"
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert done.arguments == "".join(pieces) == call.arguments
    reasoning = [e.delta for e in events if e.type == "response.reasoning_text.delta"]
    assert "".join(reasoning) == "Weather needs a tool."
    added = [e.item.type for e in events if e.type == "response.output_item.added"]
    finished = [e.item.type for e in events if e.type == "response.output_item.done"]
    assert added == finished == ["reasoning", "message", "function_call"]
    # the function_call_output continues the stored conversation
    assert follow.status == "completed"
    assert follow.usage.input_tokens > alone.usage.input_tokens + 5


def test_mid_stream_failure_ends_with_response_failed():
    with replay_client("The capital of France is Paris, a large city.") as (client, runtime):
        runtime.engine.source = FailingSource(runtime.engine.source, after=4)
        events = list(client.responses.create(model="m", input=QUESTION, stream=True))
        with pytest.raises(openai.InternalServerError):
            client.responses.create(model="m", input=QUESTION)
    types = [e.type for e in events]
    assert "response.output_text.delta" in types
    assert types[-1] == "response.failed"
    assert not {"response.completed", "response.incomplete"} & set(types)
    failed = events[-1].response
    assert failed.status == "failed" and "injected fault" in failed.error.message
    assert [e.sequence_number for e in events] == list(range(len(events)))


# -- reasoning.effort on a tiny model with think tokens ----------------------------------


@pytest.fixture(scope="module")
def tiny_client():
    with tiny_model_server() as (base, tokenizer):
        yield openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0), tokenizer


def test_reasoning_effort_sets_the_thinking_budget(tiny_client):
    """deepseek_r1 output starts inside the think block: without a budget a random model
    thinks on; "minimal" closes the block within 256 tokens (the one effort table,
    docs/apis.md); "none" switches it off."""
    client, tokenizer = tiny_client

    def thinking_tokens(response) -> int:
        items = [item for item in response.output if item.type == "reasoning"]
        text = items[0].content[0].text if items else ""
        return len(tokenizer.encode(text, add_special_tokens=False))

    kwargs = dict(model="m", input="Hello", temperature=0, max_output_tokens=300)
    unbounded = client.responses.create(**kwargs)
    assert thinking_tokens(unbounded) > 257
    minimal = client.responses.create(**kwargs, reasoning={"effort": "minimal"})
    assert 0 < thinking_tokens(minimal) <= 257
    assert minimal.usage.output_tokens > thinking_tokens(minimal)
    off = client.responses.create(**kwargs, reasoning={"effort": "none"})
    assert thinking_tokens(off) == 0 and off.output_text
