"""The Ollama API's routes, mounted by the app."""

from __future__ import annotations

from starlette.routing import Route

from .embed import embed, embeddings
from .handler import chat, generate
from .models import ps, show, tags, version

ROUTES = [
    Route("/api/chat", chat, methods=["POST"]),
    Route("/api/generate", generate, methods=["POST"]),
    Route("/api/tags", tags, methods=["GET"]),
    Route("/api/show", show, methods=["POST"]),
    Route("/api/ps", ps, methods=["GET"]),
    Route("/api/version", version, methods=["GET"]),
    Route("/api/embed", embed, methods=["POST"]),
    Route("/api/embeddings", embeddings, methods=["POST"]),
]
