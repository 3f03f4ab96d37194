"""Connection limits uvicorn lacks: a deadline for receiving each request, a cap on open
connections that sheds the longest-waiting half-sent or idle one first, an accept loop paced
below the file-descriptor limit, and no request framed by both ``Content-Length`` and
``Transfer-Encoding``.

Without them, half-sent requests stay open forever, a few thousand idle sockets exhaust the
process's file descriptors (after which even ``/health`` stops answering), and a request that
a proxy in front frames differently from us can smuggle a second one.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from contextlib import contextmanager
from dataclasses import dataclass

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)


# descriptors kept for everything but connections: model files, MCP pipes, logs, the listener
RESERVED_FDS = 128
# wakes of the accept loop that can run before the first accepted socket's ``connection_made``
# sheds the excess (accept, then the transport's task, then connection_made, then the close)
ACCEPTS_IN_FLIGHT = 4


@dataclass(frozen=True)
class ConnectionLimits:
    read_timeout: float = 30.0  # seconds to receive a whole request (head and body)
    max_connections: int = 1024
    backlog: int = 2048  # sockets asyncio accepts per wake of the accept loop (uvicorn's backlog)

    @classmethod
    def within(cls, fd_limit: int, read_timeout: float, max_connections: int) -> ConnectionLimits:
        """Limits whose worst case stays below ``fd_limit``: the open connections, plus the
        sockets accepted before ``connection_made`` can shed them, plus ``RESERVED_FDS``."""
        budget = max(fd_limit - RESERVED_FDS, 64)
        backlog = max(8, min(2048, budget // (2 * ACCEPTS_IN_FLIGHT)))
        cap = max(1, min(max_connections, budget - ACCEPTS_IN_FLIGHT * backlog))
        return cls(read_timeout=read_timeout, max_connections=cap, backlog=backlog)


def guarded_protocol(limits: ConnectionLimits) -> type[H11Protocol]:
    """An h11 protocol class enforcing ``limits`` (uvicorn's ``http=`` takes a class)."""
    return type("GuardedH11Protocol", (_Guarded,), {"limits": limits, "by_wait": {}})


class _Guarded(H11Protocol):
    limits: ConnectionLimits
    # the server's connections in the order they began waiting for their next request
    by_wait: dict[_Guarded, None]
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.conn.next_event = _refusing_ambiguous_framing(self.conn.next_event)  # type: ignore[method-assign]
        if len(self.connections) > self.limits.max_connections and not self._shed_one():
            log.warning("connection refused: %d open connections", len(self.connections))
            transport.close()
            return
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.by_wait.pop(self, None)
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self.by_wait.pop(self, None)
        self.by_wait[self] = None
        self._deadline = self.loop.call_later(self.limits.read_timeout, self._on_deadline)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def waiting_on_client(self) -> bool:
        """The connection waits for (the rest of) a request: between requests, inside the
        head, or inside the body, where the app is already running but only waits for bytes
        the client has not sent."""
        if self.conn.their_state == h11.SEND_BODY:
            return True
        return self.conn.their_state == h11.IDLE and (
            self.cycle is None or self.cycle.response_complete
        )

    def _on_deadline(self) -> None:
        self._deadline = None
        if self.waiting_on_client() and not self.transport.is_closing():
            self.transport.close()

    def _shed_one(self) -> bool:
        """Close the other connection that has waited longest on its client (never one
        whose request is being served, nor one already closing: it stays in ``connections``
        until the loop runs ``connection_lost``, so picking it again would shed nothing);
        False if there is none."""
        for other in self.by_wait:
            if other is not self and not other.transport.is_closing() and other.waiting_on_client():
                other.transport.close()
                return True
        return False


def _refusing_ambiguous_framing(next_event):
    """h11 lets Transfer-Encoding win over Content-Length; refuse the request instead
    (uvicorn answers a protocol error with a 400 and closes the connection)."""

    def checked():
        event = next_event()
        if isinstance(event, h11.Request):
            names = {name.lower() for name, _ in event.headers}
            if b"content-length" in names and b"transfer-encoding" in names:
                raise h11.RemoteProtocolError("both Content-Length and Transfer-Encoding")
        return event

    return checked


def raise_open_file_limit() -> int:
    """Lift the soft file-descriptor limit as far as the OS allows; returns the limit in force.

    Importing ``mlx_lm.utils`` sets the limits to (2048, 4096): that lowers a higher hard
    limit for the rest of the process (macOS's is unlimited) and fails the import where the
    hard limit is below 4096. It is imported here first, with that call left out."""
    with _open_file_limit_kept():
        import mlx_lm.utils  # noqa: F401
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # an unlimited hard limit still has a ceiling: macOS refuses more than its OPEN_MAX
    targets = [hard] if hard != resource.RLIM_INFINITY else [1 << 20, 65536, 10240]
    for target in targets:
        if target <= soft:
            break
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return target
        except (ValueError, OSError):
            continue
    return soft


@contextmanager
def _open_file_limit_kept():
    """``resource.setrlimit`` leaves RLIMIT_NOFILE alone while the block runs."""
    setrlimit = resource.setrlimit

    def others_only(which: int, limits: tuple[int, int]) -> None:
        if which != resource.RLIMIT_NOFILE:
            setrlimit(which, limits)

    resource.setrlimit = others_only
    try:
        yield
    finally:
        resource.setrlimit = setrlimit
