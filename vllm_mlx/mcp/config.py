"""Load and validate the MCP configuration given with ``--mcp-config FILE``.

The file is the JSON users already write for Claude Desktop (``mcpServers``) or VS Code
(``servers``), plus our global limits. Every unknown key or bad value is rejected at start-up
with the dotted path of the field, so a typo can never leave the server silently tool-less.
The file is only ever read from the path given: nothing is picked up from the cwd.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

Transport = Literal["stdio", "streamable_http", "sse"]

# Server names become tool-name prefixes (``server__tool``), so they follow OpenAI's
# function-name alphabet and leave room for the tool name.
SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")

_TRANSPORT_ALIASES: dict[str, Transport] = {
    "stdio": "stdio",
    "http": "streamable_http",
    "streamable_http": "streamable_http",
    "streamable-http": "streamable_http",
    "streamableHttp": "streamable_http",
    "sse": "sse",
}


class ConfigError(ValueError):
    """The config file is unreadable or invalid; ``problems`` holds (field path, message)."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        super().__init__(
            "invalid MCP config:\n" + "\n".join(f"  {path}: {msg}" for path, msg in problems)
        )


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ServerConfig(_Strict):
    """One MCP server: a stdio command or an HTTP endpoint, with its tool policy."""

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    # Claude Desktop / VS Code spell the transport ``type``; both spellings are accepted.
    type: str | None = None
    transport: str | None = None
    enabled: bool = True
    timeout: float | None = Field(default=None, gt=0, le=3600)
    allowed_tools: list[str] | None = None
    blocked_tools: list[str] = Field(default_factory=list)
    allowed_high_risk_tools: list[str] = Field(default_factory=list)
    allow_insecure_http: bool = False

    @field_validator("type", "transport")
    @classmethod
    def _known_transport(cls, value: str | None) -> str | None:
        if value is not None and value not in _TRANSPORT_ALIASES:
            raise ValueError(f"unknown transport {value!r}; use one of stdio, http, sse")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> ServerConfig:
        if self.type is not None and self.transport is not None:
            raise ValueError("give either 'type' or 'transport', not both")
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of 'command' (stdio) or 'url' (HTTP/SSE)")
        kind = self.resolved_transport
        if self.command is not None and kind != "stdio":
            raise ValueError(f"'command' needs the stdio transport, not {kind}")
        if self.url is not None and kind == "stdio":
            raise ValueError("'url' needs the http or sse transport, not stdio")
        if self.url is not None and (self.args or self.env or self.cwd is not None):
            raise ValueError("'args', 'env' and 'cwd' apply only to stdio servers")
        if self.command is not None and self.headers:
            raise ValueError("'headers' apply only to HTTP/SSE servers")
        return self

    @property
    def resolved_transport(self) -> Transport:
        spelled = self.type or self.transport
        if spelled is not None:
            return _TRANSPORT_ALIASES[spelled]
        return "stdio" if self.command is not None else "streamable_http"


class MCPConfig(_Strict):
    """The whole file: the servers plus the limits every tool call obeys."""

    mcpServers: dict[str, ServerConfig] | None = None  # noqa: N815 (Claude Desktop's key)
    servers: dict[str, ServerConfig] | None = None
    max_tool_calls: int = Field(default=10, ge=1, le=1000)
    default_timeout: float = Field(default=30.0, gt=0, le=3600)
    max_output_bytes: int = Field(default=100_000, ge=256, le=64 * 1024 * 1024)
    max_parallel_calls: int = Field(default=4, ge=1, le=64)
    connect_timeout: float = Field(default=15.0, gt=0, le=600)
    # Set only by the operator (--mcp-allow-any-command), never by the file: the file is what
    # the launcher allow-list distrusts.
    _allow_any_command: bool = PrivateAttr(default=False)

    @model_validator(mode="after")
    def _one_server_table(self) -> MCPConfig:
        if self.mcpServers is not None and self.servers is not None:
            raise ValueError("give either 'mcpServers' or 'servers', not both")
        for name in self.server_table:
            if not SERVER_NAME.match(name):
                raise ValueError(
                    f"server name {name!r} must be 1-32 characters of letters, digits, '_' or '-'"
                )
        return self

    @property
    def server_table(self) -> dict[str, ServerConfig]:
        return self.mcpServers if self.mcpServers is not None else (self.servers or {})

    @property
    def allow_any_command(self) -> bool:
        """True when the operator lifted the launcher, argument and environment allow-lists."""
        return self._allow_any_command

    @property
    def server_table_key(self) -> str:
        return "servers" if self.servers is not None else "mcpServers"

    def timeout_for(self, server: str) -> float:
        return self.server_table[server].timeout or self.default_timeout


def _field_path(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path or "(top level)"


def _describe(error: dict[str, Any]) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown key"
    message = error["msg"]
    return message.removeprefix("Value error, ")


def parse_config(data: Any, *, allow_any_command: bool = False) -> MCPConfig:
    """Validate already-decoded JSON; raises ConfigError naming every bad field.
    ``allow_any_command`` is the operator's opt-out of the launcher allow-list."""
    if not isinstance(data, dict):
        raise ConfigError([("(top level)", "the config must be a JSON object")])
    try:
        config = MCPConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            [(_field_path(err["loc"]), _describe(dict(err))) for err in exc.errors()]
        ) from None
    config._allow_any_command = allow_any_command
    return config


def load_config(path: str | Path, *, allow_any_command: bool = False) -> MCPConfig:
    """Read and validate the config at exactly this path (never an implicit default)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([(str(file), f"cannot read: {exc.strerror or exc}")]) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            [(str(file), f"not valid JSON: {exc.msg} at line {exc.lineno}")]
        ) from None
    return parse_config(data, allow_any_command=allow_any_command)
