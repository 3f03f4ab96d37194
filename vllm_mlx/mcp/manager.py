"""MCPManager: the one object the HTTP server holds for everything MCP.

It validates the config's security rules, starts every enabled server concurrently (a server
that fails is recorded and retried, never fatal), keeps the aggregated tool catalog current as
servers connect, crash or announce new tools, and executes calls through the executor.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from typing import Any, TextIO

import anyio

from vllm_mlx.mcp.catalog import ToolCatalog
from vllm_mlx.mcp.config import MCPConfig
from vllm_mlx.mcp.connection import ServerConnection
from vllm_mlx.mcp.executor import ToolResult, error_result, execute
from vllm_mlx.mcp.security import validate_config

logger = logging.getLogger(__name__)


class MCPManager:
    """Connections to the configured MCP servers and their aggregated tools."""

    def __init__(self, config: MCPConfig, *, errlog: TextIO | None = None):
        validate_config(config)  # raises SecurityError before anything starts
        self.config = config
        self.connections: dict[str, ServerConnection] = {
            name: ServerConnection(
                name,
                server,
                connect_timeout=config.connect_timeout,
                on_tools_changed=self._rebuild_catalog,
                errlog=errlog,
            )
            for name, server in config.server_table.items()
        }
        self.catalog = ToolCatalog({}, {})
        self._limiter: anyio.Semaphore | None = None

    async def start(self) -> None:
        """Connect all enabled servers concurrently; returns when each has connected or failed
        (bounded by ``connect_timeout``); failed servers keep retrying in the background."""
        self._limiter = anyio.Semaphore(self.config.max_parallel_calls)
        for connection in self.connections.values():
            connection.start()
        waits = [c.wait_first_attempt() for c in self.connections.values() if c.config.enabled]
        if waits:
            await asyncio.gather(*waits)
        for name, connection in self.connections.items():
            if connection.state not in {"connected", "disabled"}:
                logger.error("MCP server %s failed to start: %s", name, connection.last_error)

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self.connections.values()))
        self._rebuild_catalog()

    async def __aenter__(self) -> MCPManager:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _rebuild_catalog(self) -> None:
        self.catalog = ToolCatalog.build(
            {name: c.tools for name, c in self.connections.items()},
            {name: c.config for name, c in self.connections.items()},
        )

    def tools(self, servers: Collection[str] | None = None) -> list[dict[str, Any]]:
        """The offered tools in OpenAI ``tools`` format, optionally only those of some servers."""
        return self.catalog.openai_tools(None if servers is None else set(servers))

    def server_of(self, name: str) -> str | None:
        """Which server an exposed tool name belongs to (None when it is not an MCP tool)."""
        entry = self.catalog.entries.get(name)
        return entry.server if entry else None

    def is_mcp_tool(self, name: str) -> bool:
        """True for offered tools and for blocked ones (whose calls get a "blocked" answer)."""
        return name in self.catalog.entries or name in self.catalog.blocked

    def connected_count(self) -> int:
        """How many servers are connected now (the ``mcp_servers_up`` gauge)."""
        return sum(1 for c in self.connections.values() if c.state == "connected")

    def status(self) -> dict[str, Any]:
        """Per-server state for /health and ``GET /v1/mcp/servers``."""
        return {name: c.status() for name, c in self.connections.items()}

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | str | None = None
    ) -> ToolResult:
        """Run a tool by its exposed name; every failure comes back as an error result."""
        entry = self.catalog.entries.get(name)
        if entry is None:
            if name in self.catalog.blocked:
                return error_result(self.catalog.blocked[name], tool=name)
            known = ", ".join(sorted(self.catalog.entries)) or "none"
            return error_result(f"unknown tool {name!r}; available tools: {known}", tool=name)
        if self._limiter is None:
            return error_result("MCP manager has not been started", tool=name)
        return await execute(
            entry,
            self.connections[entry.server],
            arguments,
            timeout=self.config.timeout_for(entry.server),
            max_output_bytes=self.config.max_output_bytes,
            limiter=self._limiter,
        )
