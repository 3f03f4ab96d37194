"""The per-request context: request id, deadline, keep-alive interval and metrics tracker,
set by an ASGI middleware that also counts requests and writes one access-log line each.

Handlers reach the context with ``current_request()`` (a context variable, so shared helpers
such as ``openai_frames`` use it without every handler passing it along), and every log
record written while a request runs carries its id.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import AsyncGenerator, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from starlette.datastructures import Headers, MutableHeaders
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...pipeline import ChatEvent
from ..errors import APIError, error_response
from .auth import APIKeyAuth
from .guard import RequestGuard
from .keepalive import Idle, paced
from .metrics import RequestMetrics

if TYPE_CHECKING:
    from ...pipeline import ChatResult
    from ..state import ServerState

T = TypeVar("T")
access_log = logging.getLogger("vllm_mlx.access")

REQUEST_ID_HEADER = "x-request-id"
# A client's id is echoed into headers and logs, so only plain tokens are accepted.
_CLIENT_ID = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")


@dataclass
class RequestContext:
    request_id: str
    metrics: RequestMetrics | None = None
    timeout: float | None = None
    deadline: float | None = None  # asyncio loop time
    keepalive: float | None = None
    # run when the request's response has ended, however it ended (a model's lease)
    closers: list[Callable[[], None]] = field(default_factory=list)

    def on_close(self, closer: Callable[[], None]) -> None:
        self.closers.append(closer)

    def watch(self, events: AsyncGenerator[T, None]) -> AsyncGenerator[T | Idle, None]:
        """The request's events with ``IDLE`` while waiting too long, metrics observed (of
        the ``ChatEvent`` among them), and ``RequestTimeout`` raised (generation cancelled)
        at the deadline."""
        return self._observed(
            paced(events, interval=self.keepalive, deadline=self.deadline, timeout=self.timeout)
        )

    async def _observed(
        self, items: AsyncGenerator[T | Idle, None]
    ) -> AsyncGenerator[T | Idle, None]:
        async for item in items:
            if self.metrics is not None and isinstance(item, ChatEvent):
                self.metrics.observe_event(item)
            yield item

    def observe_result(self, result: ChatResult) -> None:
        """A non-streamed request's result: its usage and finish reason."""
        if self.metrics is not None:
            self.metrics.observe_result(result)

    def expired(self) -> bool:
        """Whether the deadline has passed (polled by non-streaming waits)."""
        return self.deadline is not None and asyncio.get_running_loop().time() >= self.deadline


_NO_REQUEST = RequestContext(request_id="-")
_current: ContextVar[RequestContext] = ContextVar("vllm_mlx_request", default=_NO_REQUEST)


def current_request() -> RequestContext:
    """The running request's context; outside a request, one with no limits or metrics."""
    return _current.get()


class RequestContextMiddleware:
    """Outermost middleware: gives each request its id and context, counts it, logs it."""

    def __init__(self, app: ASGIApp, state: ServerState):
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        state, metrics = self.state, self.state.metrics
        started = time.perf_counter()
        given = dict(scope["headers"]).get(REQUEST_ID_HEADER.encode(), b"").decode("latin-1")
        request_id = given if _CLIENT_ID.fullmatch(given) else uuid.uuid4().hex
        loop_now = asyncio.get_running_loop().time()
        context = RequestContext(
            request_id=request_id,
            metrics=metrics.request(),
            timeout=state.timeout,
            deadline=None if state.timeout is None else loop_now + state.timeout,
            keepalive=state.sse_keepalive,
        )
        status = 500  # unless a response starts

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                MutableHeaders(scope=message)[REQUEST_ID_HEADER] = request_id
            await send(message)

        token = _current.set(context)
        metrics.in_flight.inc()
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            for closer in context.closers:
                closer()
            metrics.in_flight.dec()
            route = scope.get("route")
            metrics.requests.labels(getattr(route, "path", "unmatched"), str(status)).inc()
            duration_ms = (time.perf_counter() - started) * 1000
            client = scope.get("client") or ("-", 0)
            method, path = log_safe(scope["method"]), log_safe(scope["path"])
            access_log.info(
                "method=%s path=%s status=%d duration_ms=%.1f request_id=%s client=%s",
                method,
                path,
                status,
                duration_ms,
                request_id,
                client[0],
                extra={
                    "request_id": request_id,
                    "method": method,
                    "path": path,
                    "status": status,
                    "duration_ms": round(duration_ms, 1),
                    "client": client[0],
                },
            )
            _current.reset(token)


# Control characters (a %0A in a path becomes a real newline) and ESC sequences would let a
# client forge log lines or drive the operator's terminal.
_UNSAFE_IN_LOGS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\\\\]")


def log_safe(text: str) -> str:
    """``text`` with every character that could break a log line escaped."""
    return _UNSAFE_IN_LOGS.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


class APIErrorCORSMiddleware(CORSMiddleware):
    """Starlette's CORS, with a refused preflight answered in the API's own error shape."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope) if scope["type"] == "http" else None
        if (
            headers is None
            or scope["method"] != "OPTIONS"
            or "origin" not in headers
            or "access-control-request-method" not in headers
        ):
            return await super().__call__(scope, receive, send)
        response = self.preflight_response(request_headers=headers)
        if response.status_code == 400:
            reason = bytes(response.body).decode()
            refusal = APIError(400, f"{reason} (see --allowed-origins)", code="cors_refused")
            response = error_response(scope["path"], refusal)
        await response(scope, receive, send)


class RequestIdLogFilter(logging.Filter):
    """Adds ``request_id`` to every record (``-`` outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = _current.get().request_id
        return True


def install_request_id_logging() -> None:
    """Let the root handlers' format use ``%(request_id)s``."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(RequestIdLogFilter())


def operations_middleware(state: ServerState) -> list[Middleware]:
    """Outermost first: request context (so every refusal is counted and logged), the
    Host/Origin/Content-Type guard, CORS (so browsers can read 401s and preflights need no
    key), then the API key."""
    stack = [
        Middleware(RequestContextMiddleware, state=state),
        Middleware(RequestGuard, hosts=state.hosts, allowed_origins=state.allowed_origins),
    ]
    if state.allowed_origins:
        stack.append(
            Middleware(
                APIErrorCORSMiddleware,
                allow_origins=state.allowed_origins,
                allow_methods=["GET", "POST", "OPTIONS"],
                allow_headers=["*"],
                expose_headers=[REQUEST_ID_HEADER],
            )
        )
    if state.api_key:
        stack.append(Middleware(APIKeyAuth, api_key=state.api_key))
    return stack
