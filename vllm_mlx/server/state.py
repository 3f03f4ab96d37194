"""What the HTTP handlers share: the pipeline, the served name and the defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.requests import Request

from ..engine.sampling import SamplingParams
from ..pipeline import Pipeline


@dataclass
class ServerState:
    pipeline: Pipeline
    served_model_name: str
    defaults: SamplingParams = field(default_factory=SamplingParams)
    max_body_bytes: int = 16 * 1024 * 1024


def server_state(request: Request) -> ServerState:
    return request.app.state.vllm
