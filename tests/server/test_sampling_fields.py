"""One range per sampling field (engine/sampling_bounds.py), whatever carries it: every
surface's body (as each API names the field), ``serve``'s flags, a ``models.toml`` entry and
the Python API's keywords accept the same edges and refuse the same values just past them."""

from __future__ import annotations

import json
from collections.abc import Callable

import click
import pytest
from pydantic import ValidationError

from vllm_mlx.engine.sampling_bounds import INT32_MAX
from vllm_mlx.fleet.settings import ModelSettings
from vllm_mlx.llm import _sampling as python_api_sampling
from vllm_mlx.server.errors import APIError, decode_body
from vllm_mlx.server.llamacpp.protocol import InfillRequest
from vllm_mlx.server.ollama.protocol import ChatBody
from vllm_mlx.server.openai.protocol import ChatCompletionRequest, CompletionRequest
from vllm_mlx.server.responses.protocol import ResponsesRequest
from vllm_mlx.server.serve_command import serve

# field -> (values accepted at the edges, values just past them)
EDGES: dict[str, tuple[list[float], list[float]]] = {
    "temperature": ([0, 2], [-0.01, 2.01]),
    "top_p": ([0.01, 1], [0, 1.01]),
    "top_k": ([-1, 0, INT32_MAX], [-2, INT32_MAX + 1]),
    "min_p": ([0, 1], [-0.01, 1.01]),
    "repetition_penalty": ([0.01, 10], [0, 10.5]),
    "presence_penalty": ([-2, 2], [-2.01, 2.01]),
    "frequency_penalty": ([-2, 2], [-2.01, 2.01]),
}
USER = [{"role": "user", "content": "x"}]


def _body(model: type, extra: dict) -> Callable[[str, float], object]:
    def parse(name: str, value: float) -> object:
        return decode_body(json.dumps({**extra, name: value}).encode(), model)

    return parse


def _ollama(name: str, value: float) -> object:
    name = "repeat_penalty" if name == "repetition_penalty" else name
    body = {"model": "m", "messages": USER, "options": {name: value}}
    return decode_body(json.dumps(body).encode(), ChatBody)


def _infill(name: str, value: float) -> object:
    name = "repeat_penalty" if name == "repetition_penalty" else name
    return decode_body(json.dumps({"input_prefix": "a", name: value}).encode(), InfillRequest)


def _flag(name: str, value: float) -> object:
    (param,) = [p for p in serve.params if p.name == name]
    return param.type.convert(str(value), param, None)


def _setting(name: str, value: float) -> object:
    return ModelSettings(**{name: value})


def _python_api(name: str, value: float) -> object:
    return python_api_sampling({name: value})


# carrier -> (parse one field's value, the fields it carries)
SAMPLERS = {
    "chat": (_body(ChatCompletionRequest, {"messages": USER}), list(EDGES)),
    "completions": (_body(CompletionRequest, {"prompt": "x"}), list(EDGES)),
    "responses": (_body(ResponsesRequest, {"input": "x"}), ["temperature", "top_p"]),
    "ollama": (_ollama, list(EDGES)),
    "infill": (_infill, list(EDGES)),
    "flags": (_flag, ["temperature", "top_p", "top_k", "min_p", "repetition_penalty"]),
    "models.toml": (_setting, ["temperature", "top_p", "top_k", "min_p", "repetition_penalty"]),
    "LLM": (_python_api, list(EDGES)),
}
REFUSED = (APIError, click.BadParameter, ValidationError, ValueError)
CASES = [(carrier, name) for carrier, (_, names) in SAMPLERS.items() for name in names]


@pytest.mark.parametrize(("carrier", "name"), CASES)
def test_every_carrier_has_the_fields_bounds(carrier: str, name: str) -> None:
    parse = SAMPLERS[carrier][0]
    accepted, refused = EDGES[name]
    for value in accepted:
        parse(name, value)
    for value in refused:
        with pytest.raises(REFUSED) as caught:
            parse(name, value)
        if isinstance(caught.value, APIError):
            assert caught.value.status == 400
