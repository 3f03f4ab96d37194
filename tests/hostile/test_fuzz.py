"""Hypothesis over each route's request model: valid bodies with hostile values spliced in
(wrong types, out-of-range numbers, lone surrogates, deep nesting, huge ids). Every answer
is a 2xx or a 4xx in the API's shape, streams end with their terminal event, the server
stays up and /health answers throughout. Examples are bounded to keep the suite short."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .hostile import HealthProbe, check_answer, post, raw

FUZZ = settings(
    max_examples=20,
    deadline=None,
    derandomize=True,  # the same examples every run: a failure reproduces
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

texts = st.text(max_size=20) | st.sampled_from(["\ud800", "a\udfffb", "\x00", "\u202e", ""])
numbers = st.sampled_from([-1, 0, 1, 2**31, 2**63, 2**64, -(2**64), 10**40, 0.5, 1e308, -1e-9])
scalars = st.none() | st.booleans() | numbers | texts
hostile = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
deep = st.integers(min_value=150, max_value=400).map(lambda n: {"d": "[" * n + "]" * n})

messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "system", "tool", "x"]), "content": hostile}
    ),
    min_size=0,
    max_size=3,
)
token_ids = st.lists(st.integers(min_value=-(2**65), max_value=2**65), max_size=4)

BASES = {
    "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/completions": {"model": "m", "prompt": "hi"},
    "/v1/messages": {
        "model": "m",
        "max_tokens": 4,
        "messages": [{"role": "user", "content": "hi"}],
    },
    "/v1/messages/count_tokens": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/responses": {"model": "m", "input": "hi"},
    "/v1/mcp/execute": {"name": "echo", "arguments": {"text": "hi"}},
}
FIELDS = {
    "/v1/chat/completions": {
        "messages": messages,
        "max_tokens": hostile,
        "stream": hostile,
        "temperature": hostile,
        "logit_bias": st.dictionaries(st.integers().map(str) | texts, hostile, max_size=3),
        "stop_token_ids": token_ids,
        "seed": numbers | hostile,
        "tools": hostile,
        "tool_choice": hostile,
        "response_format": hostile,
        "chat_template_kwargs": hostile,
        "n": hostile,
        "logprobs": hostile,
        "top_logprobs": hostile,
        "stop": hostile,
    },
    "/v1/completions": {
        "prompt": token_ids | texts | hostile,
        "max_tokens": hostile,
        "logit_bias": st.dictionaries(st.integers().map(str), numbers, max_size=3),
        "stop_token_ids": token_ids,
        "logprobs": hostile,
        "stream": hostile,
        "echo": hostile,
    },
    "/v1/messages": {
        "messages": messages,
        "system": hostile,
        "tools": hostile,
        "tool_choice": hostile,
        "max_tokens": hostile,
        "stream": hostile,
        "thinking": hostile,
        "stop_sequences": hostile,
        "metadata": hostile,
    },
    "/v1/messages/count_tokens": {
        "messages": messages,
        "system": hostile,
        "tools": hostile,
        "thinking": hostile,
    },
    "/v1/responses": {
        "input": texts | st.lists(hostile, max_size=3),
        "instructions": hostile,
        "tools": hostile,
        "tool_choice": hostile,
        "text": hostile,
        "reasoning": hostile,
        "metadata": hostile,
        "max_output_tokens": hostile,
        "previous_response_id": hostile,
        "stream": hostile,
    },
    "/v1/mcp/execute": {"name": hostile, "arguments": hostile},
}


def bodies(path: str) -> st.SearchStrategy[bytes]:
    """The route's base body with one to three fields replaced by hostile values, or a
    deeply nested extra field."""
    fields = FIELDS[path]
    changes = st.dictionaries(st.sampled_from(sorted(fields)), st.none(), min_size=1, max_size=3)

    @st.composite
    def build(draw) -> bytes:
        body = dict(BASES[path])
        for name in draw(changes):
            body[name] = draw(fields[name])
        body = {
            **body,
            **({"max_tokens": 4} if path != "/v1/mcp/execute" and "max_tokens" not in body else {}),
        }
        if draw(st.booleans()) and draw(st.booleans()):
            extra = draw(deep)
            return raw(body)[:-1] + b', "deep": ' + extra["d"].encode() + b"}"
        return raw(body)

    return build()


@pytest.fixture(scope="module")
def probe(replay_cli):
    with HealthProbe(replay_cli) as running:
        yield running
    assert running.samples and not running.failures(), running.failures()[:5]


def _fuzz(base: str, path: str, body: bytes) -> None:
    reply = post(base, path, body, timeout=60)
    check_answer(
        path, reply, stream=reply.headers.get("content-type", "").startswith("text/event-stream")
    )


@pytest.mark.parametrize("path", sorted(BASES))
def test_fuzzed_bodies_never_fail_the_server(replay_cli, probe, path):
    @FUZZ
    @given(body=bodies(path))
    def run(body: bytes) -> None:
        _fuzz(replay_cli, path, body)

    run()
    assert httpx.get(f"{replay_cli}/health", timeout=30).status_code == 200
