"""GET /api/tags, POST /api/show, GET /api/ps, GET /api/version: the models as Ollama
describes them.

``details`` (format, family, quantization) come from the weight files' headers, read once
per file; ``digest`` is a stable id of the model's files (their path, size and time), not a
hash of their content. ``capabilities`` say what this server does with the model:
``completion`` and ``tools`` always (templates without tools get them in the prompt),
``thinking`` when the loaded model has a reasoning format, ``insert`` when its tokenizer has
fill-in-the-middle tokens.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import math
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import mlx.core as mx
from starlette.requests import Request
from starlette.responses import JSONResponse

from ...fleet.catalog import Entry
from ...fleet.pool import Loaded, ModelPool
from ...models.errors import ModelLoadError
from ...models.gguf_header import read_gguf_header
from ..errors import APIError, parse_body
from ..state import server_state
from .handler import model_id
from .protocol import ShowBody

# The Ollama API version this surface follows (clients gate features on it).
OLLAMA_VERSION = "0.33.0"
FOREVER = datetime(2318, 1, 1, tzinfo=timezone.utc)  # Ollama's "never unloads"


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


@functools.lru_cache(maxsize=64)
def _file_facts(spec: str, files: tuple[tuple[str, int, float], ...]) -> dict:
    """Format, family and quantization from the first weight file's header."""
    if not files:
        return {"format": "", "family": "", "quantization_level": ""}
    first = Path(files[0][0])
    if first.suffix == ".gguf":
        try:
            header = read_gguf_header(first)
        except ModelLoadError:
            return {"format": "gguf", "family": "", "quantization_level": ""}
        weights = [kind for name, kind in header.tensor_types.items() if name.startswith("blk.")]
        level = Counter(weights).most_common(1)[0][0] if weights else ""
        return {"format": "gguf", "family": header.architecture or "", "quantization_level": level}
    family, level = "", ""
    config = first.parent / "config.json"
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    if isinstance(data, dict):
        family = str(data.get("model_type") or "")
        quant = data.get("quantization")
        if isinstance(quant, dict) and isinstance(quant.get("bits"), int):
            level = f"Q{quant['bits']}"
    return {"format": "safetensors", "family": family, "quantization_level": level or "F32"}


def _files(entry: Entry) -> tuple[tuple[str, int, float], ...]:
    try:
        paths = entry.weight_files()
    except (ModelLoadError, OSError):
        return ()
    facts = []
    for path in paths:
        try:
            stat = path.stat()
        except OSError:
            continue
        facts.append((str(path), stat.st_size, stat.st_mtime))
    return tuple(facts)


def _summary(entry: Entry) -> dict:
    """What /api/tags lists for ``entry`` (reads file headers: run off the event loop)."""
    files = _files(entry)
    facts = _file_facts(entry.spec, files)
    modified = max((f[2] for f in files), default=time.time())
    digest = hashlib.sha256(repr((entry.spec, files)).encode()).hexdigest()
    details = {
        "parent_model": "",
        "format": facts["format"],
        "family": facts["family"],
        "families": [facts["family"]] if facts["family"] else None,
        "parameter_size": "",
        "quantization_level": facts["quantization_level"],
    }
    return {
        "name": entry.name,
        "model": entry.name,
        "modified_at": _iso(datetime.fromtimestamp(modified, timezone.utc)),
        "size": sum(f[1] for f in files),
        "digest": digest,
        "details": details,
    }


async def tags(request: Request) -> JSONResponse:
    """Every servable model, loaded or not, the default first."""
    catalog = server_state(request).models.catalog
    names = sorted(catalog.entries, key=lambda name: (name != catalog.default, name))
    entries = [catalog.entries[name] for name in names]
    models = await asyncio.to_thread(lambda: [_summary(e) for e in entries])
    return JSONResponse({"models": models})


def _slot(pool: ModelPool, entry: Entry) -> Loaded | None:
    return next((s for s in pool.loaded() if s.entry.name == entry.name), None)


def _capabilities(slot: Loaded | None) -> list[str]:
    capabilities = ["completion", "tools"]
    if slot is not None and slot.pipeline.reasoning_format is not None:
        capabilities.append("thinking")
    if slot is not None and slot.pipeline.fim_format is not None:
        capabilities.append("insert")
    return capabilities


async def show(request: Request) -> JSONResponse:
    body = await parse_body(request, ShowBody)
    name = body.model or body.name
    if not name:
        raise APIError(400, "model is required")
    pool = server_state(request).models
    entry = pool.resolve(model_id(request, name)).entry
    slot = _slot(pool, entry)
    summary = await asyncio.to_thread(_summary, entry)
    await asyncio.to_thread(lambda: slot.pipeline.fim_format if slot is not None else None)
    context = slot.pipeline.context_length if slot is not None else entry.context_length()
    family = summary["details"]["family"] or "unknown"
    info: dict = {"general.architecture": family, "general.basename": entry.name}
    if context:
        info[f"{family}.context_length"] = context
    template = getattr(slot.pipeline.tokenizer, "chat_template", None) if slot else None
    template = template or entry.chat_template or ""
    return JSONResponse(
        {
            "modelfile": f"# served by vllm-mlx\nFROM {entry.spec}\n",
            "parameters": f"num_ctx {context}" if context else "",
            "template": template if isinstance(template, str) else "",
            "details": summary["details"],
            "model_info": info,
            "capabilities": _capabilities(slot),
            "modified_at": summary["modified_at"],
        }
    )


def _expires_at(pool: ModelPool, slot: Loaded) -> str:
    """When the model unloads if nothing uses it: in use, its TTL after now."""
    ttl = pool.idle_ttl(slot)
    if ttl is None or math.isinf(ttl):
        return _iso(FOREVER)
    at = pool.expires_at(slot)
    left = ttl if at is None else max(at - time.monotonic(), 0.0)
    return _iso(datetime.now(timezone.utc) + timedelta(seconds=left))


async def ps(request: Request) -> JSONResponse:
    """The loaded models, with when each unloads."""
    pool = server_state(request).models
    slots = pool.loaded()
    summaries = await asyncio.to_thread(lambda: [_summary(s.entry) for s in slots])
    models = []
    for slot, summary in zip(slots, summaries, strict=True):
        size = slot.memory_bytes or summary["size"]
        models.append(
            {
                **summary,
                "size": size,
                # unified memory: all of it on a Mac's GPU, none on a CPU-only machine
                "size_vram": size if mx.metal.is_available() else 0,
                "expires_at": _expires_at(pool, slot),
                "context_length": slot.pipeline.context_length,
            }
        )
    return JSONResponse({"models": models})


async def version(request: Request) -> JSONResponse:
    return JSONResponse({"version": OLLAMA_VERSION})
