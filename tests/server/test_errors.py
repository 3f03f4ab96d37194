"""The error table: every failure type gets one status and code on every surface, whether
it ends a direct answer, a stream midway, or a stream that waited for its model."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from vllm_mlx.chat.template_kwargs import ChatTemplateError
from vllm_mlx.engine.engine import QueueFullError
from vllm_mlx.engine.generation import EngineUnavailableError, GenerationError
from vllm_mlx.families.message import MessageDelta
from vllm_mlx.fleet.pool import (
    AdapterRefused,
    ModelBusy,
    ModelLoadFailed,
    ModelTooLarge,
    PoolFull,
    UnknownModel,
)
from vllm_mlx.pipeline import ChatEvent, Usage
from vllm_mlx.request import ContextLengthError, RequestError
from vllm_mlx.runtime import build_replay_runtime
from vllm_mlx.server.app import create_app
from vllm_mlx.server.errors import FAILURES
from vllm_mlx.server.serving import late_error
from vllm_mlx.server.state import ServerState

# (failure, status, code): written out here, so the table cannot agree with itself only
CASES = [
    (RequestError("tool_choice names no tool", "tool_choice"), 400, None),
    (ContextLengthError(5000, 4096), 400, None),  # a RequestError: its base's row
    (ChatTemplateError("the template rejected the messages"), 400, None),
    (AdapterRefused("model 'replay' does not serve adapters"), 400, "invalid_adapter"),
    (UnknownModel("nope", ["replay"]), 404, "model_not_found"),
    (ModelBusy("model 'replay' has 1 request(s) in flight"), 409, "model_busy"),
    (QueueFullError("256 requests are already waiting"), 429, None),
    (ModelLoadFailed("model 'x' failed to load: no weights"), 500, "model_load_failed"),
    (GenerationError("the source raised"), 500, None),
    (EngineUnavailableError("rank 1 was killed by signal 9"), 503, None),
    (PoolFull("cannot load model 'x' now"), 503, "model_capacity"),
    (ModelTooLarge("model 'x' needs about 9 GB"), 503, "model_too_large"),
    (KeyError("a bug"), 500, None),  # not in the table: an internal error
]
ENDING = (GenerationError, EngineUnavailableError)  # what a generation's last event carries

SURFACES = {
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    "completions": ("/v1/completions", {"prompt": "hi"}),
    "messages": (
        "/v1/messages",
        {"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "responses": ("/v1/responses", {"input": "hi"}),
    "ollama_chat": ("/api/chat", {"messages": [{"role": "user", "content": "hi"}]}),
    "ollama_generate": ("/api/generate", {"prompt": "hi"}),
}
DIRECT = {"stream": False}  # Ollama streams unless told not to


def test_every_row_of_the_table_has_a_case():
    assert set(FAILURES) <= {type(exc) for exc, _, _ in CASES}


@pytest.fixture(scope="module")
def served():
    runtime = build_replay_runtime("Hello.")
    app = create_app(ServerState(runtime.pipeline, "replay"))
    with TestClient(app, base_url="http://localhost", raise_server_exceptions=False) as client:
        yield client, runtime.pipeline
    runtime.close()


def failing(exc: Exception, how: str):
    """A pipeline stream that sends a first delta, then fails with ``exc``: raised, or as
    the error its generation's last event carries."""

    async def stream(prepared):
        yield ChatEvent(MessageDelta("", "Hel", []), usage=Usage(3, 1))
        if how == "raised":
            raise exc
        yield ChatEvent(MessageDelta("", "", []), finish_reason="error", error=exc)

    return stream


def events(body: str) -> list[tuple[str | None, dict]]:
    """SSE events (name, data), or NDJSON lines (None, line)."""
    if not body.startswith(("data:", "event:", ":")):
        return [(None, json.loads(line)) for line in body.splitlines() if line.strip()]
    out = []
    for block in body.split("\n\n"):
        name, data = None, None
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: ") and line != "data: [DONE]":
                data = json.loads(line[len("data: ") :])
        if data is not None:
            out.append((name, data))
    return out


def streamed_error(surface: str, body: str) -> dict:
    """The error a stream ended with, in its surface's shape."""
    found = events(body)
    if surface == "messages":
        return next(data for name, data in found if name == "error")
    if surface == "responses":
        failed = next(data for name, data in found if name == "response.failed")
        return failed["response"]["error"]
    return next(data for _, data in found if "error" in data)


def as_streamed(surface: str, direct: dict) -> dict:
    """The direct answer's error as the surface's stream carries it."""
    if surface == "responses":  # the response.failed object's error
        return {"code": direct["error"]["code"] or "server_error", **_message(direct)}
    return direct


def _message(body: dict) -> dict:
    return {"message": body["error"]["message"]}


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize(
    "exc, status, code",
    CASES,
    ids=[type(exc).__name__ + str(i) for i, (exc, _, _) in enumerate(CASES)],
)
def test_direct_and_streamed_agree(served, monkeypatch, surface, exc, status, code):
    client, pipeline = served
    path, fields = SURFACES[surface]
    hows = ["raised", "ended"] if isinstance(exc, ENDING) else ["raised"]
    for how in hows:
        monkeypatch.setattr(pipeline, "stream", failing(exc, how))
        direct = client.post(path, json={"model": "replay", **fields, **DIRECT})
        assert direct.status_code == status, (how, direct.text)
        body = direct.json()
        if surface == "messages":
            assert body["type"] == "error" and body["error"]["message"]
        elif surface.startswith("ollama"):
            assert isinstance(body["error"], str) and body["error"]  # Ollama's: one string
        else:
            assert body["error"]["code"] == code
        with client.stream("POST", path, json={"model": "replay", **fields, "stream": True}) as s:
            assert s.status_code == 200  # the failure came after the stream began
            text = s.read().decode()
        assert "Hel" in text  # the first delta went out before the failure
        assert streamed_error(surface, text) == as_streamed(surface, body), how


# the surfaces whose stream may wait for its model's load (an Ollama stream starts after)
@pytest.mark.parametrize("surface", [s for s in SURFACES if not s.startswith("ollama")])
@pytest.mark.parametrize("exc, status, code", CASES[:-1])
def test_a_stream_that_failed_before_it_began_says_the_same(
    served, monkeypatch, surface, exc, status, code
):
    """A stream that waited for its model's load ends with the API's error event."""
    client, pipeline = served
    path, fields = SURFACES[surface]
    monkeypatch.setattr(pipeline, "stream", failing(exc, "raised"))
    body = client.post(path, json={"model": "replay", **fields}).json()
    frames = events("".join(late_error(path, exc)))
    if surface == "messages":
        assert frames == [("error", body)]
    elif surface == "responses":
        ((name, data),) = frames
        assert name == "error" and (data["code"], data["message"]) == (
            code,
            body["error"]["message"],
        )
    else:
        assert frames == [(None, body)]
