"""The aggregated tool list the model sees, built from every connected server's tools.

Tools keep their own names unless two servers offer the same name; then each clashing tool is
exposed as ``server__tool``. Names are mapped onto OpenAI's function-name alphabet. Tools removed
by a server's ``allowed_tools``/``blocked_tools`` or by the high-risk rule are not offered, but
are remembered so a call to one gets a clear "blocked" answer instead of "unknown tool".
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from vllm_mlx.mcp.config import ServerConfig
from vllm_mlx.mcp.security import is_high_risk_tool

NAMESPACE_SEPARATOR = "__"
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME = 64


@dataclass(frozen=True)
class CatalogEntry:
    """One offered tool: the name the model uses, and where the call really goes."""

    exposed_name: str
    server: str
    tool: types.Tool

    @property
    def input_schema(self) -> dict[str, Any]:
        return self.tool.input_schema or {"type": "object"}

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.exposed_name,
                "description": self.tool.description or "",
                "parameters": self.input_schema,
            },
        }


def _safe_name(name: str) -> str:
    return _UNSAFE_NAME_CHARS.sub("_", name)[:_MAX_NAME]


def block_reason(tool_name: str, config: ServerConfig) -> str | None:
    """Why this server's config keeps the tool from the model, or None if it is offered."""
    if config.allowed_tools is not None and tool_name not in config.allowed_tools:
        return "not in this server's allowed_tools"
    if tool_name in config.blocked_tools:
        return "listed in this server's blocked_tools"
    if is_high_risk_tool(tool_name) and tool_name not in config.allowed_high_risk_tools:
        return "high-risk tool name (command execution); add it to allowed_high_risk_tools"
    return None


@dataclass
class ToolCatalog:
    entries: dict[str, CatalogEntry]
    blocked: dict[str, str]  # exposed or original name -> reason

    @classmethod
    def build(
        cls, tools: Mapping[str, list[types.Tool]], configs: Mapping[str, ServerConfig]
    ) -> ToolCatalog:
        offered: list[tuple[str, types.Tool]] = []
        blocked: dict[str, str] = {}
        for server, server_tools in tools.items():
            for tool in server_tools:
                reason = block_reason(tool.name, configs[server])
                if reason is None:
                    offered.append((server, tool))
                else:
                    blocked[tool.name] = f"tool {tool.name!r} on {server!r} is blocked: {reason}"
                    blocked[f"{server}{NAMESPACE_SEPARATOR}{tool.name}"] = blocked[tool.name]
        counts = Counter(_safe_name(tool.name) for _, tool in offered)
        entries: dict[str, CatalogEntry] = {}
        for server, tool in offered:
            plain = _safe_name(tool.name)
            name = (
                plain if counts[plain] == 1 else _safe_name(f"{server}{NAMESPACE_SEPARATOR}{plain}")
            )
            entries[name] = CatalogEntry(name, server, tool)
        return cls(entries, {k: v for k, v in blocked.items() if k not in entries})

    def openai_tools(self, servers: set[str] | None = None) -> list[dict[str, Any]]:
        return [
            entry.to_openai()
            for entry in self.entries.values()
            if servers is None or entry.server in servers
        ]
