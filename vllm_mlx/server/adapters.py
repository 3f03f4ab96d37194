"""``POST /v1/adapters`` and ``DELETE /v1/adapters/{name}``: the operator loads and unloads
adapters while the server runs (behind ``--api-key`` like every route but ``/health``).

A loaded adapter is then a model id like the configured ones (its name, or
``BASE:NAME``), listed by ``/v1/models`` with its base as ``parent``.
"""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse

from ..fleet.adapters import AdapterEntry, checked_folder
from ..fleet.catalog import CatalogError
from ..fleet.pool import ModelPool, UnknownModel
from ..fleet.settings import SettingsError
from .errors import APIError, parse_body
from .state import server_state


class LoadAdapterBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(min_length=1, max_length=256, pattern=r"^[^\s]+$")
    path: str = Field(min_length=1, max_length=4096)
    base: str | None = Field(default=None, min_length=1, max_length=256)


def adapter_card(pool: ModelPool, adapter: AdapterEntry) -> dict:
    """What /v1/models and the load route say of an adapter."""
    base = pool.catalog.base_name(adapter)
    slot = next((s for s in pool.loaded() if s.entry.name == base), None)
    served = slot.adapters.get(adapter.name) if slot and slot.adapters else None
    return {
        "id": adapter.name,
        "object": "model",
        "owned_by": "vllm-mlx",
        "parent": base,
        "root": str(adapter.path),
        "adapter": {
            "loaded": served is not None,
            "kind": served.weights.kind if served else None,
            "rank": served.weights.rank if served else None,
        },
    }


async def load_adapter(request: Request) -> JSONResponse:
    """Load the adapter folder at ``path`` on ``base`` (default: the default model) now, and
    serve it as ``name``; a mismatched adapter is a 400 naming the mismatch."""
    body = await parse_body(request, LoadAdapterBody)
    pool: ModelPool = server_state(request).models
    catalog = pool.catalog
    known = catalog.adapters.get(body.name)
    try:
        folder = checked_folder(body.path, f"adapter {body.name!r}")
    except SettingsError as exc:
        raise APIError(400, str(exc), param="path", code="invalid_adapter") from None
    base = catalog.lookup(body.base or catalog.default)
    if base is None or base.adapter is not None:
        raise UnknownModel(body.base, sorted(catalog.entries))
    if known is not None and (known.path != folder or catalog.base_name(known) != base.name):
        raise APIError(409, f"adapter {body.name!r} is already served from {known.path}")
    adapter = known or AdapterEntry(body.name, folder, base.name, "POST /v1/adapters")
    if known is None:
        try:
            catalog.add_adapter(adapter)
        except CatalogError as exc:
            raise APIError(409, str(exc), param="name") from None
    started = time.perf_counter()
    try:
        slot = await pool.load(base.name)
        await pool.load_adapter(slot, adapter)
    except Exception:
        if known is None:
            catalog.adapters.pop(body.name, None)
        raise
    card = adapter_card(pool, adapter)
    return JSONResponse({**card, "load_seconds": round(time.perf_counter() - started, 3)})


async def unload_adapter(request: Request) -> JSONResponse:
    """Unload and stop serving an adapter (409 while requests use it)."""
    pool: ModelPool = server_state(request).models
    name = request.path_params["name"]
    if name not in pool.catalog.adapters:
        raise APIError(
            404, f"adapter {name!r} is not served here", param="name", code="model_not_found"
        )
    was_loaded = await pool.unload_adapter(name)
    del pool.catalog.adapters[name]
    return JSONResponse({"id": name, "deleted": True, "was_loaded": was_loaded})
