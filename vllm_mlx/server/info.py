"""GET /v1/models, GET /health, and the root that clients probe."""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..native import status as native_status
from .state import server_state

_STARTED = int(time.time())


async def list_models(request: Request) -> JSONResponse:
    state = server_state(request)
    return JSONResponse(
        {
            "object": "list",
            "data": [
                {
                    "id": state.served_model_name,
                    "object": "model",
                    "created": _STARTED,
                    "owned_by": "vllm-mlx",
                    "max_model_len": state.pipeline.context_length,
                }
            ],
        }
    )


async def health(request: Request) -> JSONResponse:
    state = server_state(request)
    return JSONResponse(
        {
            "status": "ok",
            "model": state.served_model_name,
            "queue_depth": state.pipeline.engine.queue_depth,
            "running": state.pipeline.engine.running,
            "mcp": state.mcp.status() if state.mcp is not None else None,
            "cpu_kernels": native_status(),
        }
    )


async def root(request: Request) -> Response:
    """``HEAD /`` and ``GET /``: Claude Code probes the root before its first request."""
    state = server_state(request)
    return JSONResponse({"status": "ok", "model": state.served_model_name})
