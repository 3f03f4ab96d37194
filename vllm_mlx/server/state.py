"""What the HTTP handlers share: the models (a pool; one model given as ``pipeline`` and
``served_model_name`` is a pool of one), the operations settings and the MCP manager."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from ..fleet.embedders import EmbeddingModels
from ..fleet.pool import ModelPool
from ..pipeline import Pipeline
from .ops.guard import HostPolicy
from .ops.metrics import ServerMetrics


@dataclass
class ServerState:
    pipeline: Pipeline | None  # one model served under every id, or None with ``models``
    served_model_name: str  # the default model's id
    max_body_bytes: int = 16 * 1024 * 1024
    # operations (docs/operations.md)
    api_key: str | None = None
    allowed_origins: list[str] = field(default_factory=list)
    # the Host names answered (DNS rebinding): loopback unless bound elsewhere/--allowed-hosts
    hosts: HostPolicy = field(default_factory=lambda: HostPolicy.for_binding("127.0.0.1"))
    timeout: float | None = None  # seconds per request
    sse_keepalive: float | None = 15.0  # seconds of silence before a keep-alive
    metrics: ServerMetrics = field(default_factory=ServerMetrics)
    # the Responses store's budget (text characters of the kept responses)
    responses_store_bytes: int = 128 * 1024 * 1024
    # MCP: the manager (started with the app) for --mcp-config, else None
    mcp: Any = None
    # a sharded server's rank group (distributed.group.GroupHealth), else None
    distributed: Any = None
    # the models requests choose from (server/serving.py)
    models: ModelPool = None  # type: ignore[assignment]  # set in __post_init__ when None
    # the catalog's embedding and reranking models (server/embedding_service.py)
    embedders: EmbeddingModels = field(default_factory=EmbeddingModels)

    def __post_init__(self) -> None:
        if self.models is None:
            assert self.pipeline is not None, "a ServerState needs a pipeline or a pool"
            self.models = ModelPool.single(self.pipeline, self.served_model_name)


def server_state(request: Request) -> ServerState:
    return request.app.state.vllm
