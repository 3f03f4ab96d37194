"""MCP config loading: both server-table keys, strict keys and values, clear field paths."""

from __future__ import annotations

import json

import pytest

from vllm_mlx.mcp.config import ConfigError, load_config, parse_config


def problems(data: object) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    return info.value.problems


def test_claude_desktop_and_vscode_tables_both_load(tmp_path):
    claude = {"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"]}}}
    vscode = {"servers": {"remote": {"type": "http", "url": "https://tools.example/mcp"}}}
    path = tmp_path / "claude.json"
    path.write_text(json.dumps(claude))
    loaded = load_config(path)
    assert list(loaded.server_table) == ["time"]
    assert loaded.server_table["time"].resolved_transport == "stdio"
    remote = parse_config(vscode).server_table["remote"]
    assert remote.resolved_transport == "streamable_http"
    assert parse_config(vscode).server_table_key == "servers"


def test_sse_transport_and_url_default_to_http():
    config = parse_config(
        {
            "mcpServers": {
                "old": {"url": "http://127.0.0.1:9/sse", "transport": "sse"},
                "new": {"url": "http://127.0.0.1:9/mcp"},
            }
        }
    )
    assert config.server_table["old"].resolved_transport == "sse"
    assert config.server_table["new"].resolved_transport == "streamable_http"


def test_global_limits_and_per_server_timeout():
    config = parse_config(
        {
            "mcpServers": {"a": {"command": "srv", "timeout": 2}, "b": {"command": "srv"}},
            "max_tool_calls": 3,
            "default_timeout": 7.5,
            "max_output_bytes": 4096,
            "max_parallel_calls": 2,
            "connect_timeout": 5,
        }
    )
    assert (config.max_tool_calls, config.max_output_bytes, config.max_parallel_calls) == (
        3,
        4096,
        2,
    )
    assert config.timeout_for("a") == 2
    assert config.timeout_for("b") == 7.5


def test_unknown_keys_are_reported_with_their_path():
    found = problems({"mcpServers": {"a": {"command": "srv", "argz": []}}, "max_calls": 1})
    assert ("mcpServers.a.argz", "unknown key") in found
    assert ("max_calls", "unknown key") in found


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"mcpServers": {"a": {"command": "srv", "args": ["ok", 3]}}}, "mcpServers.a.args[1]"),
        ({"mcpServers": {"a": {"command": "srv", "enabled": "yes"}}}, "mcpServers.a.enabled"),
        ({"mcpServers": {"a": {"command": "srv", "timeout": 0}}}, "mcpServers.a.timeout"),
        ({"mcpServers": {"a": {"command": "srv", "env": {"K": 1}}}}, "mcpServers.a.env.K"),
        ({"mcpServers": {"a": {"url": "https://x", "type": "websocket"}}}, "mcpServers.a.type"),
        ({"mcpServers": {"a": {"command": "srv"}}, "max_tool_calls": 0}, "max_tool_calls"),
        ({"mcpServers": {"a": {"command": "srv"}}, "max_tool_calls": "5"}, "max_tool_calls"),
        ({"mcpServers": {"a": {"command": "srv"}}, "max_parallel_calls": 0}, "max_parallel_calls"),
        ({"mcpServers": {"a": {"command": "srv"}}, "max_output_bytes": -1}, "max_output_bytes"),
        ({"mcpServers": {"a": {"command": "srv"}}, "connect_timeout": 0}, "connect_timeout"),
        ({"mcpServers": {"a": {"command": "srv", "url": "https://x"}}}, "mcpServers.a"),
        ({"mcpServers": {"a": {}}}, "mcpServers.a"),
        ({"mcpServers": {"a": {"command": "srv", "headers": {"A": "b"}}}}, "mcpServers.a"),
        ({"mcpServers": {"a": {"url": "https://x", "args": ["x"]}}}, "mcpServers.a"),
        ({"mcpServers": {"a": {"url": "https://x", "type": "stdio"}}}, "mcpServers.a"),
        ({"mcpServers": {"a": {"command": "srv"}}, "servers": {}}, "(top level)"),
        ({"mcpServers": {"bad name!": {"command": "srv"}}}, "(top level)"),
        ({"mcpServers": []}, "mcpServers"),
    ],
)
def test_invalid_values_name_the_field(data, path):
    found = problems(data)
    assert path in [p for p, _ in found], found


def test_error_message_has_one_line_per_field():
    with pytest.raises(ConfigError) as info:
        parse_config({"mcpServers": {"a": {"command": "srv", "x": 1, "timeout": -1}}})
    lines = str(info.value).splitlines()
    assert lines[0] == "invalid MCP config:"
    assert "  mcpServers.a.timeout: Input should be greater than 0" in lines
    assert "  mcpServers.a.x: unknown key" in lines


def test_unreadable_and_malformed_files_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{ not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(broken)
    with pytest.raises(ConfigError, match="JSON object"):
        parse_config(["not", "an", "object"])
