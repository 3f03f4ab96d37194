"""The routes of the browser UI: the playground at ``/``, the status view at ``/status`` and
the JSON it polls at ``/v1/status``.

``/`` is also what API clients probe (Claude Code sends ``HEAD /`` before its first
request), so only a browser asking for HTML gets the page; everything else gets the JSON
root as before. The pages need no API key (``--api-key`` guards the API calls they make,
which carry it); ``/v1/status`` does.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..info import root
from ..state import server_state
from .pages import page_response
from .status import TokenRate, completion_rate, status_data

PAGE_PATHS = frozenset({"/", "/status"})


def _wants_html(request: Request) -> bool:
    return request.method == "GET" and "text/html" in request.headers.get("accept", "")


async def playground(request: Request) -> Response:
    if not _wants_html(request):
        return await root(request)
    _rate(request).sample()  # a point for the status view's rate history
    return page_response("playground", server_state(request).api_key is not None)


async def status_page(request: Request) -> Response:
    _rate(request).sample()
    return page_response("status", server_state(request).api_key is not None)


def _rate(request: Request) -> TokenRate:
    """This app's last-minute token rate (made on first use, kept on the app)."""
    app_state = request.app.state
    rate = getattr(app_state, "ui_token_rate", None)
    if rate is None:
        rate = app_state.ui_token_rate = completion_rate(server_state(request).metrics)
    return rate


async def status_json(request: Request) -> JSONResponse:
    return JSONResponse(status_data(server_state(request), _rate(request)))


ROUTES = [
    Route("/", playground, methods=["GET", "HEAD"]),
    Route("/status", status_page, methods=["GET"]),
    Route("/v1/status", status_json, methods=["GET"]),
]
