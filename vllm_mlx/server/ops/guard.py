"""Requests a local server must refuse before any handler runs: a ``Host`` it does not
answer to (DNS rebinding), a cross-site ``Origin`` on a state-changing route, and a body
that is not JSON on a JSON route (a ``text/plain`` or form POST needs no CORS preflight, so
any web page could otherwise make the browser call the API).

docs/security.md says what each check stops and how to open it up deliberately.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import APIError, error_response

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "localhost.localdomain"})
_STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class HostPolicy:
    """Which ``Host`` names the server answers to. DNS rebinding needs a DNS name, so any IP
    literal is answered; names must be loopback names, the bound host (the machine's own
    names when bound to every interface), or ``--allowed-hosts`` entries (``*`` for any,
    ``.example.com`` for a domain and its subdomains)."""

    names: frozenset[str]
    any_host: bool = False

    @staticmethod
    def for_binding(bind_host: str, allowed: Iterable[str] = ()) -> HostPolicy:
        names = set(LOOPBACK_NAMES) | {bind_host.lower().strip("[]")}
        if bind_host in ("0.0.0.0", "::", ""):
            names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
        extra = {name.strip().lower() for name in allowed if name.strip()}
        return HostPolicy(frozenset(names | extra), any_host="*" in extra)

    def allows(self, host: str) -> bool:
        if self.any_host or _ip_address(host) is not None:
            return True
        return self.names_host(host)

    def allows_origin(self, host: str) -> bool:
        """A page on ``host`` is the same site: a loopback address or a named host (never
        ``*``, and never an arbitrary IP, which could be any web server)."""
        address = _ip_address(host)
        return address.is_loopback if address is not None else self.names_host(host)

    def names_host(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        if host in self.names:
            return True
        return any(n.startswith(".") and (host.endswith(n) or host == n[1:]) for n in self.names)


def _ip_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def host_name(value: str) -> str:
    """The name in a ``Host`` header or an origin, without port or IPv6 brackets."""
    if "://" in value:
        return (urlsplit(value).hostname or "").lower()
    value = value.strip()
    if value.startswith("["):
        return value[1 : value.find("]")].lower() if "]" in value else ""
    return value.rsplit(":", 1)[0].lower() if value.count(":") == 1 else value.lower()


def is_json_media_type(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


class RequestGuard:
    """ASGI middleware applying the three checks; refusals in the API's own error shape."""

    def __init__(self, app: ASGIApp, hosts: HostPolicy, allowed_origins: Iterable[str] = ()):
        self.app = app
        self.hosts = hosts
        self.allowed_origins = frozenset(o.rstrip("/") for o in allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        error = self._refusal(scope)
        if error is not None:
            return await error_response(scope["path"], error)(scope, receive, send)
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> APIError | None:
        headers = Headers(scope=scope)
        host = headers.get("host")
        if host is None or not self.hosts.allows(host_name(host)):
            return APIError(
                400,
                "this server does not answer to that Host header (see --allowed-hosts)",
                code="invalid_host",
            )
        if scope["method"] not in _STATE_CHANGING:
            return None
        origin = headers.get("origin")
        if origin is not None and not self._origin_allowed(origin):
            return APIError(
                403,
                "cross-origin request refused (see --allowed-origins)",
                code="origin_not_allowed",
            )
        if _has_body(headers) and not is_json_media_type(headers.get("content-type", "")):
            return APIError(415, "request body must be JSON (Content-Type: application/json)")
        return None

    def _origin_allowed(self, origin: str) -> bool:
        """Same-site origins (a page this server serves, or any loopback page) and the
        operator's ``--allowed-origins``; ``null`` (sandboxed frames, files) is refused."""
        if "*" in self.allowed_origins or origin.rstrip("/") in self.allowed_origins:
            return True
        name = host_name(origin) if origin != "null" else ""
        return bool(name) and self.hosts.allows_origin(name)


def _has_body(headers: Headers) -> bool:
    length = headers.get("content-length")
    return "transfer-encoding" in headers or (length is not None and length.strip() != "0")
