"""GET /v1/models, GET /v1/models/{id}, GET /health, and the root that clients probe.

The server serves one model under every id a request names (Claude Code and Codex send
their own), so ``/v1/models/{id}`` answers for any id, reporting the served model behind it.
A request with an ``anthropic-version`` header (the Anthropic SDKs, Claude Code) gets
Anthropic's list shape; every other client gets OpenAI's.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..native import status as native_status
from .state import ServerState, server_state

_STARTED = int(time.time())
_STARTED_AT = datetime.fromtimestamp(_STARTED, timezone.utc).isoformat().replace("+00:00", "Z")


def _capabilities(state: ServerState) -> dict:
    pipeline = state.pipeline
    return {
        "tool_calls": pipeline.tool_format is not None,
        "reasoning": pipeline.reasoning_format is not None,
        "vision": False,
        "structured_output": True,
    }


def _openai_model(state: ServerState, model_id: str) -> dict:
    context = state.pipeline.context_length
    return {
        "id": model_id,
        "object": "model",
        "created": _STARTED,
        "owned_by": "vllm-mlx",
        "root": state.served_model_name,
        # what clients read for the window: vLLM's, LM Studio's/OpenRouter's, Codex's names
        "max_model_len": context,
        "context_length": context,
        "context_window": context,
        "capabilities": _capabilities(state),
    }


def _anthropic_model(state: ServerState, model_id: str) -> dict:
    return {
        "type": "model",
        "id": model_id,
        "display_name": model_id,
        "created_at": _STARTED_AT,
        "max_input_tokens": state.pipeline.context_length,
    }


def _wants_anthropic(request: Request) -> bool:
    return "anthropic-version" in request.headers


async def list_models(request: Request) -> JSONResponse:
    state = server_state(request)
    name = state.served_model_name
    if _wants_anthropic(request):
        return JSONResponse(
            {
                "data": [_anthropic_model(state, name)],
                "has_more": False,
                "first_id": name,
                "last_id": name,
            }
        )
    return JSONResponse({"object": "list", "data": [_openai_model(state, name)]})


async def get_model(request: Request) -> JSONResponse:
    state = server_state(request)
    model_id = request.path_params["model_id"]
    if _wants_anthropic(request):
        return JSONResponse(_anthropic_model(state, model_id))
    return JSONResponse(_openai_model(state, model_id))


async def health(request: Request) -> JSONResponse:
    """200 while the server can generate; 503 (with the reason) once it cannot, which is
    what a gateway's health check acts on."""
    state = server_state(request)
    group = state.distributed
    failure = state.pipeline.engine.unavailable or (group.failure if group else None)
    return JSONResponse(
        {
            "status": "unavailable" if failure else "ok",
            "error": failure,
            "model": state.served_model_name,
            "queue_depth": state.pipeline.engine.queue_depth,
            "running": state.pipeline.engine.running,
            "mcp": state.mcp.status() if state.mcp is not None else None,
            "cpu_kernels": native_status(),
            "distributed": group.describe() if group is not None else None,
        },
        status_code=503 if failure else 200,
    )


def _version() -> str:
    try:
        return package_version("vllm-mlx")
    except PackageNotFoundError:
        return "unknown"


async def version(request: Request) -> JSONResponse:
    """``GET /version`` (vLLM's): what a gateway probes to tell an OpenAI-compatible
    worker from others (SMG then reads the served name and context from /v1/models)."""
    return JSONResponse({"version": _version()})


async def root(request: Request) -> Response:
    """``HEAD /`` and ``GET /``: Claude Code probes the root before its first request."""
    state = server_state(request)
    return JSONResponse({"status": "ok", "model": state.served_model_name})
