"""Security checks on the MCP config, run before any process starts or socket opens.

The config decides which programs this server launches and where it sends requests, so each
server entry is checked against a fixed set of rules. A violation names its rule and the field;
every violation in the file is reported at once. Child processes get a minimal environment so
our own secrets (API keys in our environment) never reach a tool server.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import urlsplit

from vllm_mlx.mcp.config import MCPConfig, ServerConfig


@dataclass(frozen=True)
class Violation:
    rule: str
    field: str
    detail: str

    def __str__(self) -> str:
        return f"{self.field}: [{self.rule}] {self.detail}"


class SecurityError(ValueError):
    """The config breaks one or more security rules."""

    def __init__(self, violations: list[Violation]):
        self.violations = violations
        super().__init__(
            "MCP config rejected by security rules:\n" + "\n".join(f"  {v}" for v in violations)
        )


# Characters that only mean something to a shell; we never use one, so their presence means
# the config was written for (or to attack) a shell.
SHELL_METACHARACTERS = frozenset(";|&`$<>")
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")

# Interpreter name pattern -> flags that run code given inline on the command line.
_INLINE_CODE_FLAGS: list[tuple[re.Pattern[str], frozenset[str]]] = [
    (re.compile(r"^(python|pypy)[\d.]*$"), frozenset({"-c"})),
    (re.compile(r"^(node|nodejs|bun)$"), frozenset({"-e", "--eval", "-p", "--print"})),
    (re.compile(r"^deno$"), frozenset({"eval", "--eval", "--eval-file"})),
    (re.compile(r"^(npx|pnpx|bunx)$"), frozenset({"-c", "--call"})),
    (re.compile(r"^(ba|z|da|k|c|tc|fi)?sh$"), frozenset({"-c"})),
    (re.compile(r"^(pwsh|powershell)(\.exe)?$"), frozenset({"-c", "-command", "-encodedcommand"})),
    (re.compile(r"^cmd(\.exe)?$"), frozenset({"/c", "/k"})),
    (re.compile(r"^perl[\d.]*$"), frozenset({"-e", "-E"})),
    (re.compile(r"^ruby[\d.]*$"), frozenset({"-e"})),
    (re.compile(r"^php[\d.]*$"), frozenset({"-r"})),
    (re.compile(r"^(lua|luajit)[\d.]*$"), frozenset({"-e"})),
    (re.compile(r"^Rscript$"), frozenset({"-e"})),
    (re.compile(r"^osascript$"), frozenset({"-e"})),
]
# Flags whose short-option cluster may end in the inline flag (``python -Ic``, ``bash -xc``).
_CLUSTERABLE = {"-c", "-e", "-E"}
# Interpreter options that take a separate value, so the next word is not yet the script.
_VALUE_OPTIONS = frozenset(
    {"-W", "-X", "-r", "--require", "--import", "--loader", "--experimental-loader", "-o", "-O"}
    | {"--rcfile", "--init-file", "-I", "--package", "-p"}
)

# Programs that run another program with altered privileges or evaluate their arguments.
_FORBIDDEN_COMMANDS = re.compile(r"^(sudo|su|doas|pkexec|eval|exec|xargs|env)$")

_DANGEROUS_ENV_EXACT = frozenset(
    {
        "PATH",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PYTHONINSPECT",
        "PYTHONUSERBASE",
        "NODE_OPTIONS",
        "NODE_PATH",
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        "IFS",
        "PROMPT_COMMAND",
        "PERL5OPT",
        "PERL5LIB",
        "PERLLIB",
        "RUBYOPT",
        "RUBYLIB",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "GCONV_PATH",
        "LOCPATH",
        "HOSTALIASES",
        "GIT_SSH_COMMAND",
        "GIT_EXEC_PATH",
    }
)
_DANGEROUS_ENV_PREFIXES = ("LD_", "DYLD_", "BASH_FUNC_")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

# What a child process inherits from us; everything else comes from its config entry.
INHERITED_ENV_KEYS = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER", "TERM")

# Tool-name words that suggest running arbitrary commands.
_HIGH_RISK_WORDS = frozenset(
    {"exec", "execute", "shell", "eval", "bash", "sh", "zsh", "cmd", "terminal", "subprocess"}
    | {"spawn", "powershell", "pwsh", "popen"}
)
_HIGH_RISK_PHRASES = ("run_command", "runcommand", "run_cmd", "run_script", "run_code", "os_system")


def _has_traversal(path: str) -> bool:
    return ".." in PurePosixPath(path.replace("\\", "/")).parts


def _text_violations(value: str, field: str) -> list[Violation]:
    found = []
    if CONTROL_CHARACTERS.search(value):
        found.append(Violation("control-characters", field, "newlines/control characters"))
    bad = sorted(set(value) & SHELL_METACHARACTERS)
    if bad:
        found.append(Violation("shell-metacharacters", field, f"contains {''.join(bad)!r}"))
    return found


def _inline_code_violations(argv: list[str], field: str) -> list[Violation]:
    """Find interpreter invocations (anywhere in argv, to catch wrappers) with inline code."""
    found = []
    for i, word in enumerate(argv):
        name = PurePosixPath(word.replace("\\", "/")).name
        flags = next((f for pattern, f in _INLINE_CODE_FLAGS if pattern.match(name)), None)
        if flags is None:
            continue
        for j, arg in enumerate(argv[i + 1 :], start=i + 1):
            if arg in {"-m", "--"}:
                break  # the interpreter's own options end at its module or script
            if not arg.startswith("-") and argv[j - 1] not in _VALUE_OPTIONS and arg != "eval":
                break
            lowered = arg if arg in _CLUSTERABLE else arg.lower()
            clustered = (
                re.match(r"^-[A-Za-z]+$", arg) is not None
                and not arg.startswith("--")
                and any(f"-{arg[-1]}" == flag for flag in flags & _CLUSTERABLE)
            )
            if lowered in flags or clustered or arg.split("=", 1)[0] in flags:
                where = f"{field}[{j - 1}]" if j > 0 else field
                found.append(
                    Violation("inline-code", where, f"{name} {arg} runs code from the argument")
                )
                break
    return found


def _command_violations(base: str, server: ServerConfig) -> list[Violation]:
    command = server.command or ""
    found: list[Violation] = []
    if not command.strip():
        return [Violation("empty-command", f"{base}.command", "command is empty")]
    if any(ch.isspace() for ch in command):
        found.append(
            Violation(
                "command-not-argv",
                f"{base}.command",
                "command must be one executable; put its arguments in 'args'",
            )
        )
    found += _text_violations(command, f"{base}.command")
    for i, arg in enumerate(server.args):
        found += _text_violations(arg, f"{base}.args[{i}]")
    if _has_traversal(command):
        found.append(Violation("path-traversal", f"{base}.command", "'..' in the command path"))
    program = PurePosixPath(command.replace("\\", "/")).name
    if _FORBIDDEN_COMMANDS.match(program):
        found.append(
            Violation("forbidden-command", f"{base}.command", f"{program} may not start servers")
        )
    found += _inline_code_violations([command, *server.args], f"{base}.args")
    if server.cwd is not None:
        found += _text_violations(server.cwd, f"{base}.cwd")
        if _has_traversal(server.cwd):
            found.append(
                Violation("path-traversal", f"{base}.cwd", "'..' in the working directory")
            )
    for key, value in server.env.items():
        field = f"{base}.env.{key}"
        if not _ENV_KEY.match(key):
            found.append(Violation("env-key-invalid", field, "not a valid variable name"))
        elif key.upper() in _DANGEROUS_ENV_EXACT or key.upper().startswith(_DANGEROUS_ENV_PREFIXES):
            found.append(
                Violation("dangerous-env", field, f"{key} changes how programs load or run")
            )
        if CONTROL_CHARACTERS.search(value):
            found.append(Violation("control-characters", field, "newlines/control characters"))
    return found


def is_loopback_host(host: str) -> bool:
    if host.lower() in {"localhost", "localhost."}:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url_violations(base: str, server: ServerConfig) -> list[Violation]:
    field = f"{base}.url"
    url = server.url or ""
    found = []
    if CONTROL_CHARACTERS.search(url) or any(ch.isspace() for ch in url):
        return [Violation("control-characters", field, "whitespace/control characters in URL")]
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"}:
        return [Violation("url-scheme", field, f"scheme {parts.scheme!r} is not http(s)")]
    if not parts.hostname:
        return [Violation("url-host", field, "URL has no host")]
    if parts.username or parts.password:
        found.append(Violation("url-credentials", field, "put credentials in 'headers'"))
    if parts.scheme == "http" and not is_loopback_host(parts.hostname):
        if not server.allow_insecure_http:
            found.append(
                Violation(
                    "plain-http-remote",
                    field,
                    f"plain http to {parts.hostname}; use https or set allow_insecure_http",
                )
            )
    for key, value in server.headers.items():
        hfield = f"{base}.headers.{key}"
        if not _HEADER_NAME.match(key):
            found.append(Violation("header-invalid", hfield, "not a valid header name"))
        if CONTROL_CHARACTERS.search(value):
            found.append(Violation("header-injection", hfield, "newlines in a header value"))
    return found


def server_violations(
    name: str, server: ServerConfig, table: str = "mcpServers"
) -> list[Violation]:
    """Every rule one server entry breaks (empty when it is acceptable)."""
    base = f"{table}.{name}"
    if server.command is not None:
        return _command_violations(base, server)
    return _url_violations(base, server)


def validate_config(config: MCPConfig) -> None:
    """Raise SecurityError listing every violation in the config; enabled or not."""
    violations = [
        v
        for name, server in config.server_table.items()
        for v in server_violations(name, server, config.server_table_key)
    ]
    if violations:
        raise SecurityError(violations)


def child_environment(
    configured: dict[str, str], parent: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment a stdio server starts with: a whitelist of ours plus its config's env."""
    source = os.environ if parent is None else parent
    env = {key: source[key] for key in INHERITED_ENV_KEYS if key in source}
    env.update(configured)
    return env


def _name_words(name: str) -> Iterable[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return (w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w)


def is_high_risk_tool(name: str) -> bool:
    """True when a tool's name suggests it executes arbitrary commands or code."""
    lowered = name.lower()
    if any(phrase in lowered for phrase in _HIGH_RISK_PHRASES):
        return True
    return any(word in _HIGH_RISK_WORDS for word in _name_words(name))
