"""One MCP server's client session: connect, keep alive, reconnect with backoff.

Each server gets an owner task that enters the SDK's transport and ``ClientSession`` context
managers and stays inside them while connected: anyio requires a session to be opened and
closed by the same task, so neither start-up nor restarts can happen in a caller's task. A lost
connection (a crashed stdio process, a failed ping, a call that saw the pipe close) ends the
session; the owner task then reconnects after an exponential backoff.
"""

from __future__ import annotations

import asyncio
import logging
import math
import sys
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any, TextIO

import anyio
import httpx2
import mcp_types as types
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from vllm_mlx.mcp.config import ServerConfig
from vllm_mlx.mcp.security import child_environment
from vllm_mlx.mcp.stdio import stdio_transport

logger = logging.getLogger(__name__)

# Largest single message accepted from a server (a bigger answer fails only its own call);
# our own output cap (max_output_bytes) applies after.
MAX_TRANSPORT_MESSAGE_BYTES = 64 * 1024 * 1024


def describe_error(exc: BaseException) -> str:
    """A one-line reason, unwrapping the exception groups anyio task groups raise."""
    while isinstance(getattr(exc, "exceptions", None), tuple) and exc.exceptions:  # type: ignore[attr-defined]
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text


class ServerConnection:
    """The live session to one configured server and its last known tool list."""

    backoff_initial = 0.5
    backoff_max = 30.0
    ping_interval = 5.0

    def __init__(
        self,
        name: str,
        config: ServerConfig,
        *,
        connect_timeout: float,
        on_tools_changed: Callable[[], None],
        errlog: TextIO | None = None,
    ):
        self.name = name
        self.config = config
        self.connect_timeout = connect_timeout
        self.state = "disabled" if not config.enabled else "pending"
        self.tools: list[types.Tool] = []
        self.last_error: str | None = None
        self.restarts = 0
        self._on_tools_changed = on_tools_changed
        self._errlog = errlog or sys.stderr
        self._session: ClientSession | None = None
        self._wake = asyncio.Event()
        self._lost = False
        self._refresh_requested = False
        self._stopping = False
        self._scope: anyio.CancelScope | None = None
        self._task: asyncio.Task[None] | None = None
        self._attempt_done = asyncio.Event()

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Launch the owner task; it connects and reconnects until close()."""
        if self._task is None and self.config.enabled:
            self._task = asyncio.create_task(self._run(), name=f"mcp-server-{self.name}")

    async def wait_first_attempt(self) -> None:
        """Return once the first connection attempt has succeeded or failed."""
        await self._attempt_done.wait()

    async def close(self) -> None:
        self._stopping = True
        if self._scope is not None:
            self._scope.cancel()
        self._wake.set()
        if self._task is not None:
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._session = None
        if self.config.enabled:
            self.state = "stopped"

    @property
    def session(self) -> ClientSession | None:
        return self._session if self.state == "connected" else None

    def mark_lost(self, reason: str) -> None:
        """Called when a request saw the connection close: end this session and reconnect."""
        if self.state == "connected":
            logger.warning("MCP server %s: connection lost (%s)", self.name, reason)
            self.last_error = reason
            self.state = "lost"
            self._lost = True
            self._wake.set()

    # -- the owner task --------------------------------------------------------------------

    async def _run(self) -> None:
        failures = 0
        while not self._stopping:
            connected = await self._serve_once()
            self._attempt_done.set()
            if self._stopping:
                break
            failures = 0 if connected else failures + 1
            delay = min(self.backoff_max, self.backoff_initial * 2 ** max(0, failures - 1))
            self.state = "restarting" if connected else "failed"
            self.restarts += 1
            logger.warning(
                "MCP server %s: %s; reconnecting in %.1fs", self.name, self.last_error, delay
            )
            with anyio.move_on_after(delay):
                while not self._stopping:
                    await self._wake.wait()
                    self._wake.clear()

    async def _serve_once(self) -> bool:
        """Connect, serve until the connection is lost or stopped; True if it was connected."""
        connected = False
        self._lost = False
        self.state = "connecting"
        scope = anyio.CancelScope(deadline=anyio.current_time() + self.connect_timeout)
        self._scope = scope
        try:
            with scope:
                async with AsyncExitStack() as stack:
                    session = await self._open(stack)
                    await session.initialize()
                    await self._refresh_tools(session)
                    scope.deadline = math.inf
                    self._session = session
                    self.state = "connected"
                    self.last_error = None
                    connected = True
                    self._attempt_done.set()
                    logger.info("MCP server %s: connected, %d tools", self.name, len(self.tools))
                    await self._keep_alive(session)
            if scope.cancelled_caught and not connected and not self._stopping:
                self.last_error = f"connect timed out after {self.connect_timeout:g}s"
        except Exception as exc:  # any failure of a tool server is recorded, never raised
            self.last_error = describe_error(exc)
        finally:
            self._session = None
            self._scope = None
        if connected and self.tools:
            self.tools = []
            self._on_tools_changed()
        return connected

    async def _open(self, stack: AsyncExitStack) -> ClientSession:
        cfg = self.config
        kind = cfg.resolved_transport
        if kind == "stdio":
            params = StdioServerParameters(
                command=cfg.command or "",
                args=list(cfg.args),
                env=child_environment(dict(cfg.env)),
                cwd=cfg.cwd,
            )
            read, write = await stack.enter_async_context(
                stdio_transport(params, self._errlog, MAX_TRANSPORT_MESSAGE_BYTES)
            )
        elif kind == "sse":
            read, write = await stack.enter_async_context(
                sse_client(cfg.url or "", headers=dict(cfg.headers), timeout=self.connect_timeout)
            )
        else:
            http = create_mcp_http_client(
                headers=dict(cfg.headers),
                timeout=httpx2.Timeout(self.connect_timeout, read=300.0),
            )
            await stack.enter_async_context(http)
            # the SDK types this transport's streams apart from the others; all are anyio's
            read, write = await stack.enter_async_context(
                streamable_http_client(  # type: ignore[arg-type]
                    cfg.url or "", http_client=http, max_sse_event_size=MAX_TRANSPORT_MESSAGE_BYTES
                )
            )
        return await stack.enter_async_context(
            ClientSession(read, write, message_handler=self._on_message)
        )

    async def _keep_alive(self, session: ClientSession) -> None:
        """Wait for a refresh request or a lost connection; ping when idle."""
        while not self._stopping:
            with anyio.move_on_after(self.ping_interval) as idle:
                await self._wake.wait()
            self._wake.clear()
            if self._lost or self._stopping:
                return
            if self._refresh_requested:
                self._refresh_requested = False
                await self._refresh_tools(session)
            elif idle.cancelled_caught:
                try:
                    with anyio.fail_after(self.ping_interval):
                        await session.send_ping()
                except Exception as exc:
                    self.last_error = f"ping failed: {describe_error(exc)}"
                    return

    async def _refresh_tools(self, session: ClientSession) -> None:
        tools: list[types.Tool] = []
        cursor: str | None = None
        while True:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        self.tools = tools
        self._on_tools_changed()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            logger.info("MCP server %s: tool list changed", self.name)
            self._refresh_requested = True
            self._wake.set()
        elif isinstance(message, Exception):
            logger.warning("MCP server %s: transport error: %s", self.name, message)

    def status(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "transport": self.config.resolved_transport,
            "tools": len(self.tools),
            "last_error": self.last_error,
            "restarts": self.restarts,
        }
