"""``--api-key``: every route but ``/health`` and the UI pages requires the key, sent the
OpenAI way (``Authorization: Bearer KEY``) or the Anthropic way (``x-api-key: KEY``).

Keys are compared with ``hmac.compare_digest`` so the time taken does not reveal how much of
a guess was right. A rejection is a 401 in the route's API error shape.
"""

from __future__ import annotations

import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import APIError, error_response

# the UI pages (server/ui) are static and hold no data; the API calls they make carry the key
OPEN_PATHS = frozenset({"/health", "/", "/status"})


def presented_keys(headers: list[tuple[bytes, bytes]]) -> list[bytes]:
    """The credentials a request carries, from either header style."""
    keys = []
    for name, value in headers:
        if name == b"x-api-key":
            keys.append(value.strip())
        elif name == b"authorization":
            scheme, _, credential = value.strip().partition(b" ")
            if scheme.lower() == b"bearer":
                keys.append(credential.strip())
    return keys


class APIKeyAuth:
    def __init__(self, app: ASGIApp, api_key: str):
        self.app = app
        self.api_key = api_key.encode()

    def _authorized(self, scope: Scope) -> bool:
        # Check every presented key (no early exit) so timing does not depend on which matched.
        matches = [hmac.compare_digest(k, self.api_key) for k in presented_keys(scope["headers"])]
        return any(matches)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or self._authorized(scope):
            return await self.app(scope, receive, send)
        has_credentials = bool(presented_keys(scope["headers"]))
        message = (
            "invalid API key"
            if has_credentials
            else ("missing API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'")
        )
        response = error_response(scope["path"], APIError(401, message))
        response.headers["www-authenticate"] = "Bearer"
        await response(scope, receive, send)
