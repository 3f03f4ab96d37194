"""Which MCP tools a Responses request may use: its ``{"type": "mcp", "server_label": ...}``
tools resolved against the servers of ``--mcp-config`` (the server never connects to a URL
the client sends), with ``allowed_tools`` filters; every problem is a 400 naming the tool,
before anything runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...mcp.catalog import CatalogEntry
from ..errors import APIError
from .convert import new_item_id


@dataclass
class ServerTools:
    """One ``mcp`` tool of the request: a configured server and the tools it may use."""

    label: str
    entries: list[CatalogEntry]
    error: str | None = None  # why the server has no tools right now

    def list_item(self) -> dict[str, Any]:
        tools = [
            {
                "name": e.tool.name,
                "description": e.tool.description or "",
                "input_schema": e.input_schema,
                "annotations": _annotations(e),
            }
            for e in self.entries
        ]
        return {
            "id": new_item_id("mcpl"),
            "type": "mcp_list_tools",
            "server_label": self.label,
            "tools": tools,
            "error": self.error,
        }


@dataclass
class MCPSelection:
    servers: list[ServerTools]
    entries: dict[str, CatalogEntry] = field(init=False)  # by the name the model sees

    def __post_init__(self) -> None:
        self.entries = {e.exposed_name: e for s in self.servers for e in s.entries}

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The tools the model sees, in chat form."""
        return [e.to_openai() for e in self.entries.values()]

    def tool_choice(self, choice: Any) -> Any:
        """An ``mcp`` tool_choice naming a server's tool, as the name the model sees."""
        if not isinstance(choice, dict) or choice.get("type") != "mcp" or not choice.get("name"):
            return choice
        for entry in self.entries.values():
            if entry.server == choice.get("server_label") and entry.tool.name == choice["name"]:
                return {"type": "function", "name": entry.exposed_name}
        raise APIError(
            400,
            f"tool_choice names {choice['name']!r}, which server "
            f"{choice.get('server_label')!r} does not offer to this request",
            param="tool_choice",
        )


def select_mcp_tools(tools: list[dict] | None, manager: Any) -> MCPSelection | None:
    """The request's ``mcp`` tools resolved against the configured servers; None without
    any. Every problem is a 400 naming the tool, before anything runs."""
    specs = [(i, t) for i, t in enumerate(tools or []) if t.get("type") == "mcp"]
    if not specs:
        return None
    if manager is None:
        raise APIError(
            400,
            "mcp tools need MCP servers; start the server with --mcp-config FILE",
            param=f"tools.{specs[0][0]}",
        )
    configured = manager.status()
    servers: list[ServerTools] = []
    for i, spec in specs:
        label = spec.get("server_label")
        if not isinstance(label, str) or not label:
            raise APIError(400, "mcp tools need a server_label", param=f"tools.{i}.server_label")
        if label not in configured:
            known = ", ".join(sorted(configured)) or "none"
            raise APIError(
                400,
                f"unknown MCP server_label {label!r}; configured servers: {known}",
                param=f"tools.{i}.server_label",
            )
        if any(s.label == label for s in servers):
            raise APIError(
                400, f"server_label {label!r} is listed twice", param=f"tools.{i}.server_label"
            )
        for key in ("server_url", "connector_id"):
            if spec.get(key):
                raise APIError(
                    400,
                    f"{key} is not supported: this server only runs the MCP servers of its "
                    "--mcp-config, named by server_label",
                    param=f"tools.{i}.{key}",
                )
        approval = spec.get("require_approval")
        if approval not in (None, "never"):
            raise APIError(
                400,
                'approvals are not supported; use "require_approval": "never"',
                param=f"tools.{i}.require_approval",
            )
        allowed = _allowed(spec.get("allowed_tools"), f"tools.{i}.allowed_tools")
        entries = [
            e
            for e in manager.catalog.entries.values()
            if e.server == label and _permits(allowed, e)
        ]
        status = configured[label]
        error = None if status["state"] == "connected" else _unavailable(status)
        servers.append(ServerTools(label, entries, error))
    return MCPSelection(servers)


def _allowed(value: Any, param: str) -> tuple[set[str] | None, bool]:
    """``allowed_tools`` as (names or None, read_only): a list, or a filter object."""
    if value is None:
        return None, False
    if isinstance(value, list) and all(isinstance(n, str) for n in value):
        return set(value), False
    if isinstance(value, dict):
        names = value.get("tool_names")
        if names is not None and not (
            isinstance(names, list) and all(isinstance(n, str) for n in names)
        ):
            raise APIError(400, "tool_names must be a list of names", param=f"{param}.tool_names")
        return (set(names) if names is not None else None), bool(value.get("read_only"))
    raise APIError(400, "allowed_tools must be a list of tool names or a filter", param=param)


def _permits(allowed: tuple[set[str] | None, bool], entry: CatalogEntry) -> bool:
    names, read_only = allowed
    if names is not None and not {entry.tool.name, entry.exposed_name} & names:
        return False
    return not read_only or _annotations(entry).get("read_only_hint") is True


def _annotations(entry: CatalogEntry) -> dict[str, Any]:
    notes = entry.tool.annotations
    return notes.model_dump(exclude_none=True) if notes is not None else {}


def _unavailable(status: dict[str, Any]) -> str:
    reason = f": {status['last_error']}" if status.get("last_error") else ""
    return f"server is {status['state']}{reason}"
