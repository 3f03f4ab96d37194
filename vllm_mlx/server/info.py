"""GET /v1/models, GET /v1/models/{id}, GET /health, and the root that clients probe.

Every id a request names that is not a model's (Claude Code and Codex send their own) gets
the default model, so ``/v1/models/{id}`` answers for any id, reporting the model behind it
as ``root`` (``--strict-model-ids``: a 404). The list holds every servable model, loaded or
not; ``POST /v1/models/{id}/load`` and ``/unload`` are the operator's.
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

from ..embeddings.kinds import ModelFacts
from ..fleet.catalog import Entry
from ..fleet.pool import UnknownModel
from ..models.vision import has_vision_tower
from ..native import status as native_status
from .adapters import adapter_card
from .state import ServerState, server_state

_STARTED = int(time.time())
_STARTED_AT = datetime.fromtimestamp(_STARTED, timezone.utc).isoformat().replace("+00:00", "Z")


def _described(state: ServerState, entry: Entry) -> dict:
    """What a client may want to know of a model before using it: loaded or not, its
    context (known before loading when its config says) and its parsers."""
    facts = state.embedders.facts(entry)
    if facts is not None:
        return _embedding_model(state, entry, facts)
    slot = next((s for s in state.models.loaded() if s.entry.name == entry.name), None)
    reasoning: str | None
    tool: str | None
    if slot is None:
        settings = entry.settings
        reasoning = settings.reasoning_parser or "auto"
        tool = settings.tool_call_parser or "auto"
        context = entry.context_length()
        has_reasoning: bool | None = None if reasoning == "auto" else True
        vision = has_vision_tower(entry.spec)
    else:
        pipeline = slot.pipeline
        reasoning = pipeline.reasoning_format.name if pipeline.reasoning_format else None
        tool = pipeline.tool_format.name if pipeline.tool_format else None
        context = pipeline.context_length
        has_reasoning = pipeline.reasoning_format is not None
        vision = pipeline.vision is not None
    return {
        "type": "llm",
        "loaded": slot is not None,
        "context": context,
        "parsers": {"reasoning": reasoning, "tool_calls": tool},
        "capabilities": {
            "tool_calls": tool is not None,
            "reasoning": has_reasoning,
            "vision": vision,
            "structured_output": True,
        },
        "aliases": list(entry.aliases),
    }


def _embedding_model(state: ServerState, entry: Entry, facts: ModelFacts) -> dict:
    """An embedding model or reranker: what it serves instead of chat (LM Studio's
    ``type``), its input limit as the context."""
    embeds = facts.kind == "embedding"
    return {
        "type": "embeddings" if embeds else "rerank",
        "loaded": state.embedders.is_loaded(entry.name),
        "context": facts.max_length,
        "parsers": {"reasoning": None, "tool_calls": None},
        "capabilities": {
            "embeddings": embeds,
            "rerank": not embeds,
            "tool_calls": False,
            "reasoning": False,
            "vision": False,
            "structured_output": False,
        },
        "aliases": list(entry.aliases),
    }


def _openai_model(state: ServerState, entry: Entry, model_id: str) -> dict:
    about = _described(state, entry)
    context = about.pop("context")
    return {
        "id": model_id,
        "object": "model",
        "created": _STARTED,
        "owned_by": "vllm-mlx",
        "root": entry.name,
        # what clients read for the window: vLLM's, LM Studio's/OpenRouter's, Codex's names
        "max_model_len": context,
        "context_length": context,
        "context_window": context,
        **about,
    }


def _anthropic_model(state: ServerState, entry: Entry, model_id: str) -> dict:
    return {
        "type": "model",
        "id": model_id,
        "display_name": model_id,
        "created_at": _STARTED_AT,
        "max_input_tokens": _described(state, entry)["context"],
    }


def _wants_anthropic(request: Request) -> bool:
    return "anthropic-version" in request.headers


def _entry(state: ServerState, model_id: str | None) -> Entry:
    return state.models.resolve(model_id).entry


async def list_models(request: Request) -> JSONResponse:
    """Every servable model, the default first."""
    state = server_state(request)
    catalog = state.models.catalog
    names = sorted(catalog.entries, key=lambda name: (name != catalog.default, name))
    entries = [catalog.entries[name] for name in names]
    if _wants_anthropic(request):
        return JSONResponse(
            {
                "data": [_anthropic_model(state, e, e.name) for e in entries],
                "has_more": False,
                "first_id": names[0] if names else None,
                "last_id": names[-1] if names else None,
            }
        )
    cards = [_openai_model(state, e, e.name) for e in entries]
    cards += [adapter_card(state.models, a) for a in catalog.adapters.values()]
    return JSONResponse({"object": "list", "data": cards})


async def get_model(request: Request) -> JSONResponse:
    state = server_state(request)
    model_id = request.path_params["model_id"]
    entry = _entry(state, model_id)
    if _wants_anthropic(request):
        return JSONResponse(_anthropic_model(state, entry, model_id))
    return JSONResponse(_openai_model(state, entry, model_id))


async def load_model(request: Request) -> JSONResponse:
    """POST /v1/models/{id}/load: load it now (an operator warming a model up)."""
    state = server_state(request)
    entry = _exact(state, request.path_params["model_id"])
    slot = await state.models.load(entry.name)
    return JSONResponse(
        {"id": entry.name, "loaded": True, "load_seconds": round(slot.load_seconds, 3)}
    )


async def unload_model(request: Request) -> JSONResponse:
    """POST /v1/models/{id}/unload: free its memory now (409 while requests use it)."""
    state = server_state(request)
    entry = _exact(state, request.path_params["model_id"])
    was_loaded = await state.models.unload(entry.name)
    return JSONResponse({"id": entry.name, "loaded": False, "was_loaded": was_loaded})


def _exact(state: ServerState, model_id: str) -> Entry:
    """An operator's id must name a model (never the default in its place)."""
    entry = state.models.catalog.lookup(model_id)
    if entry is None:
        known = sorted(state.models.catalog.entries)
        raise UnknownModel(model_id, known)
    return entry


async def health(request: Request) -> JSONResponse:
    """200 while the server can generate, loads under way included; 503 (with the reason)
    once it cannot, which is what a gateway's health check acts on."""
    state = server_state(request)
    pool = state.models
    group = state.distributed
    # a halted engine (a sharded server's failed rank group) cannot generate any more
    halted = state.pipeline.engine.unavailable if state.pipeline is not None else None
    failure = halted or (group.failure if group else None)
    return JSONResponse(
        {
            "status": "unavailable" if failure else "ok",
            "error": failure,
            "model": state.served_model_name,
            "queue_depth": pool.queue_depth(),
            "running": pool.running(),
            "models": {
                "loaded": sorted(slot.entry.name for slot in pool.loaded()),
                "loading": sorted(n for n in pool.catalog.entries if pool.is_loading(n)),
                "adapters": {  # the adapters loaded on each loaded model
                    slot.entry.name: sorted(a.name for a in slot.adapters.loaded())
                    for slot in pool.loaded()
                    if slot.adapters is not None and slot.adapters.loaded()
                },
            },
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
