"""The starlette application: routes per API surface, error shapes, middleware."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from . import adapters
from .anthropic.handler import count_tokens, create_message
from .errors import FAILURES, APIError, api_error, error_response
from .info import get_model, health, list_models, load_model, unload_model, version
from .llamacpp.infill import infill
from .mcp import routes as mcp_routes
from .ollama.routes import ROUTES as OLLAMA_ROUTES
from .openai.chat import chat_completions
from .openai.completions import completions
from .openai.embeddings import embeddings
from .ops.limits import BodySizeLimit
from .ops.metrics import metrics_endpoint
from .ops.middleware import operations_middleware
from .rerank import rerank
from .responses.handler import create_response, get_response
from .state import ServerState
from .ui.routes import ROUTES as UI_ROUTES

log = logging.getLogger(__name__)


async def _failed(request: Request, exc: Exception) -> Response:
    """Every failure the table knows (and ``APIError``, starlette's HTTP errors)."""
    return error_response(request.url.path, api_error(exc))


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s", request.url.path)
    return error_response(request.url.path, api_error(exc))


async def _client_gone(request: Request, exc: Exception) -> Response:
    """The client left before its request was whole (or a shed half-sent one): nothing can
    reach it, and a traceback per socket would flood the log; 499 is what the access log and
    metrics see."""
    return Response(status_code=499)


@contextlib.asynccontextmanager
async def _lifespan(app: Starlette):
    """Connect the configured MCP servers while the app runs (failures are per server) and
    unload idle models (``--model-ttl``); on shutdown, stop the models, which finishes their
    prefix caches' disk writes (uvicorn re-raises SIGTERM after its shutdown, so nothing
    later would run)."""
    state = app.state.vllm
    if state.mcp is not None:
        await state.mcp.start()
    idle = asyncio.ensure_future(state.models.watch_idle())
    try:
        yield
    finally:
        idle.cancel()
        if state.mcp is not None:
            await state.mcp.close()
        await state.models.close()


def create_app(state: ServerState) -> Starlette:
    routes = [
        *UI_ROUTES,  # the playground at /, the status view (server/ui)
        Route("/health", health, methods=["GET"]),
        Route("/version", version, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model_id:path}/load", load_model, methods=["POST"]),
        Route("/v1/models/{model_id:path}/unload", unload_model, methods=["POST"]),
        Route("/v1/models/{model_id:path}", get_model, methods=["GET"]),
        Route("/v1/adapters", adapters.load_adapter, methods=["POST"]),
        Route("/v1/adapters/{name:path}", adapters.unload_adapter, methods=["DELETE"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/v1/rerank", rerank, methods=["POST"]),
        Route("/rerank", rerank, methods=["POST"]),
        Route("/v1/messages", create_message, methods=["POST"]),
        Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
        Route("/v1/responses", create_response, methods=["POST"]),
        Route("/v1/responses/{response_id}", get_response, methods=["GET"]),
        Route("/v1/mcp/servers", mcp_routes.list_servers, methods=["GET"]),
        Route("/v1/mcp/status", mcp_routes.status, methods=["GET"]),
        Route("/v1/mcp/tools", mcp_routes.list_tools, methods=["GET"]),
        Route("/v1/mcp/execute", mcp_routes.execute, methods=["POST"]),
        Route("/infill", infill, methods=["POST"]),  # llama.cpp's fill-in-the-middle
        *OLLAMA_ROUTES,  # /api/chat, /api/generate, /api/tags… (server/ollama)
    ]
    app = Starlette(
        routes=routes,
        lifespan=_lifespan,
        middleware=[
            *operations_middleware(state),
            Middleware(BodySizeLimit, max_bytes=state.max_body_bytes),
        ],
        exception_handlers={
            **{kind: _failed for kind in (APIError, HTTPException, *FAILURES)},
            ClientDisconnect: _client_gone,
            Exception: _unexpected,
        },
    )
    pool = state.models
    state.metrics.watch_engine(pool.queue_depth, pool.running, pool.spec_counts)
    state.metrics.watch_models(pool)
    if state.mcp is not None:
        state.metrics.watch_mcp(state.mcp.connected_count)
    app.state.vllm = state
    return app
