"""Security checks on the MCP config, run before any process starts or socket opens.

The config decides which programs this server launches and where it sends requests, so each
server entry is checked against a fixed set of rules: commands against the launcher allow-list
(launchers.py), environment names against an allow-list, URLs and headers against their own
rules. A violation names its rule and the field; every violation in the file is reported at
once. Child processes get a minimal environment so our own secrets (API keys in our
environment) never reach a tool server. The operator's ``--mcp-allow-any-command`` lifts the
command and environment allow-lists (never the structural checks or privilege escalation).
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
from vllm_mlx.mcp.launchers import launcher_problems, program_name


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

# Programs that run another program with altered privileges or evaluate their arguments;
# the first group stays forbidden even under --mcp-allow-any-command.
_PRIVILEGE_COMMANDS = re.compile(r"^(sudo|su|doas|pkexec|runas)$")
_FORBIDDEN_COMMANDS = re.compile(r"^(sudo|su|doas|pkexec|runas|eval|exec|xargs|env|nohup|timeout)$")

# Environment variables a server may be given: an allow-list of ordinary settings and of
# credentials/endpoints by their suffix. Names that make a program load or run other code are
# named by a deny-list first, for a clearer message (and so that BASH_ENV is no ``*_ENV``).
_ENV_ALLOWED_EXACT = frozenset(
    {"LANG", "LANGUAGE", "TZ", "TERM", "NO_COLOR", "FORCE_COLOR", "NODE_ENV", "DEBUG"}
    | {"LOG_LEVEL", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"}
    | {"http_proxy", "https_proxy", "no_proxy", "all_proxy"}
    | {"PYTHONUNBUFFERED", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONDONTWRITEBYTECODE"}
)
_ENV_ALLOWED = re.compile(
    r"^(LC_[A-Z]+|[A-Z][A-Z0-9_]*_(API_KEY|KEY|TOKEN|SECRET|PASSWORD|PAT|ID|URL|URI|ENDPOINT"
    r"|HOST|PORT|REGION|PROFILE|USER|USERNAME|ORG|ORGANIZATION|PROJECT|WORKSPACE|ACCOUNT"
    r"|DOMAIN|LEVEL|TIMEOUT|MODE|DATABASE|DB|BUCKET|MODEL|NAME|EMAIL|CHANNEL|TEAM))$"
)
_DANGEROUS_ENV_EXACT = frozenset(
    {"PATH", "HOME", "BROWSER", "EDITOR", "VISUAL", "PAGER", "SHELL", "ENV", "IFS", "PS4"}
    | {"PROMPT_COMMAND", "SHELLOPTS", "BASHOPTS", "HOSTALIASES", "LOCPATH", "CLASSPATH"}
)
_DANGEROUS_ENV_PREFIXES = (
    *("LD_", "DYLD_", "BASH_", "PYTHON", "NODE_", "NPM_", "YARN_", "PNPM_", "BUN_", "DENO_"),
    *("UV_", "PIP_", "POETRY_", "CONDA_", "VIRTUAL_ENV", "PERL", "RUBY", "GEM_", "BUNDLE_"),
    *("LUA_", "JAVA", "_JAVA", "JDK_", "GIT_", "SSH_", "DOCKER_", "PODMAN_", "CONTAINERS_"),
    *("ELECTRON_", "GLIBC_", "MALLOC_", "OPENSSL_", "XDG_", "GCONV_"),
)
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


def env_violation(key: str, field: str) -> Violation | None:
    """Why a server may not be given this environment variable (None when it may)."""
    if not _ENV_KEY.match(key):
        return Violation("env-key-invalid", field, "not a valid variable name")
    if key in _ENV_ALLOWED_EXACT:
        return None
    if key.upper() in _DANGEROUS_ENV_EXACT or key.upper().startswith(_DANGEROUS_ENV_PREFIXES):
        return Violation("dangerous-env", field, f"{key} changes how programs load or run")
    if not _ENV_ALLOWED.match(key):
        return Violation(
            "env-not-allowed",
            field,
            f"{key} is not an allowed variable (settings such as LANG/TZ, or names ending in "
            "_API_KEY, _TOKEN, _SECRET, _URL, _ID, …)",
        )
    return None


def _launcher_violations(base: str, server: ServerConfig) -> list[Violation]:
    command = server.command or ""
    program = program_name(command)
    if _FORBIDDEN_COMMANDS.match(program):
        return [
            Violation("forbidden-command", f"{base}.command", f"{program} may not start servers")
        ]
    shapes = [
        Violation(rule, f"{base}.command" if i < 0 else f"{base}.args[{i}]", detail)
        for i, rule, detail in launcher_problems(command, list(server.args), server.cwd)
    ]
    # The interpreter scan also looks behind launchers (``uvx … python -c``); where both
    # flag the same argument, its "inline-code" says more than "argument-shape".
    inline = _inline_code_violations([command, *server.args], f"{base}.args")
    flagged = {v.field for v in inline}
    return [v for v in shapes if v.field not in flagged] + inline


def _command_violations(base: str, server: ServerConfig, any_command: bool) -> list[Violation]:
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
    if any_command:
        program = program_name(command)
        if _PRIVILEGE_COMMANDS.match(program):
            found.append(
                Violation(
                    "forbidden-command", f"{base}.command", f"{program} may not start servers"
                )
            )
    else:
        found += _launcher_violations(base, server)
    if server.cwd is not None:
        found += _text_violations(server.cwd, f"{base}.cwd")
        if _has_traversal(server.cwd):
            found.append(
                Violation("path-traversal", f"{base}.cwd", "'..' in the working directory")
            )
    for key, value in server.env.items():
        field = f"{base}.env.{key}"
        problem = env_violation(key, field)
        if problem is not None and (not any_command or problem.rule == "env-key-invalid"):
            found.append(problem)
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
    name: str, server: ServerConfig, table: str = "mcpServers", *, any_command: bool = False
) -> list[Violation]:
    """Every rule one server entry breaks (empty when it is acceptable). ``any_command`` is the
    operator's opt-out: any program, arguments and environment, bar privilege escalation."""
    base = f"{table}.{name}"
    if server.command is not None:
        return _command_violations(base, server, any_command)
    return _url_violations(base, server)


def validate_config(config: MCPConfig) -> None:
    """Raise SecurityError listing every violation in the config; enabled or not."""
    violations = [
        v
        for name, server in config.server_table.items()
        for v in server_violations(
            name, server, config.server_table_key, any_command=config.allow_any_command
        )
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
