"""Connection limits uvicorn lacks: a deadline for receiving each request, a cap on open
connections that sheds idle ones first, and no request framed by both ``Content-Length`` and
``Transfer-Encoding``.

Without them, half-sent requests stay open forever, a few thousand idle sockets exhaust the
process's file descriptors (after which even ``/health`` stops answering), and a request that
a proxy in front frames differently from us can smuggle a second one.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from dataclasses import dataclass

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConnectionLimits:
    read_timeout: float = 30.0  # seconds to receive a whole request (head and body)
    max_connections: int = 1024


def guarded_protocol(limits: ConnectionLimits) -> type[H11Protocol]:
    """An h11 protocol class enforcing ``limits`` (uvicorn's ``http=`` takes a class)."""
    return type("GuardedH11Protocol", (_Guarded,), {"limits": limits})


class _Guarded(H11Protocol):
    limits: ConnectionLimits
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
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.limits.read_timeout, self._on_deadline)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def waiting_on_client(self) -> bool:
        """No request is being served: the connection waits for (the rest of) one."""
        return self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and (
            self.cycle is None or self.cycle.response_complete
        )

    def _on_deadline(self) -> None:
        self._deadline = None
        if self.waiting_on_client() and not self.transport.is_closing():
            self.transport.close()

    def _shed_one(self) -> bool:
        """Close one other connection that is only waiting on its client (never one whose
        request is being served, nor one already closing: it stays in ``connections`` until
        the loop runs ``connection_lost``, so picking it again would shed nothing); False if
        there is none."""
        for other in list(self.connections):
            if (
                other is not self
                and isinstance(other, _Guarded)
                and not other.transport.is_closing()
                and other.waiting_on_client()
            ):
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
    """Lift the soft file-descriptor limit to the hard one; returns the limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return target
        except (ValueError, OSError):
            pass
    return soft
