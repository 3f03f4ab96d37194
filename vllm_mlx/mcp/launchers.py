"""Which programs may start an MCP stdio server, and in which argument shapes.

An allow-list, not a deny-list: every way a program can be told to run code given on its
command line (``-c``, ``-e``, ``-exec``, ``BEGIN{system()}``, wrappers such as ``env`` or
``timeout``…) cannot be enumerated, but the shapes MCP servers are launched in can. A command
is accepted only when its program is a known launcher and its arguments fit that launcher's
shape; everything else needs the operator's ``--mcp-allow-any-command``.

The launchers and shapes (``[…]`` optional, ``…`` the server's own arguments, never checked):

- ``npx|pnpx|bunx [-y|--yes|-q|--quiet] PACKAGE …``
- ``uvx [--from SPEC] [--with SPEC]… [--python VERSION] [-q] PACKAGE …``
- ``uv [--directory DIR] [-q] run [--with SPEC]… [--python VERSION] [--directory DIR]
  [-q|--frozen|--locked|--no-sync] (SCRIPT.py | ENTRY_POINT) …``
- ``python[3[.N]] [-u|-B|-s|-I|-O|-OO|-P]… (SCRIPT.py | -m MODULE) …`` where MODULE names an
  MCP server (a dotted name with ``mcp`` in one of its parts)
- ``node|nodejs [--no-warnings|--no-deprecation|--enable-source-maps]… SCRIPT.{js,mjs,cjs} …``
- ``deno run [--allow-*|--deny-*|-A|-q|--quiet|--no-prompt|--unstable-*]…
  (npm:… | jsr:… | https://… | SCRIPT.{ts,js,mjs,tsx}) …``
- ``docker|podman run [-i|--interactive|--rm|--init|-e NAME[=VALUE]|--env NAME[=VALUE]|
  --name NAME]… IMAGE …`` (no mounts, no privileges, no other entrypoint)

SCRIPT must be an existing file (relative names are taken from the entry's ``cwd``) outside
installed packages and standard libraries; PACKAGE, ENTRY_POINT and MODULE may not name an
interpreter or a shell (``npx node -e …``). What the allow-list guarantees is that the config
runs the package, script or image it names, not code written into the config; whether that
package deserves trust is the config author's call.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath

# (index into args, or -1 for the command itself; rule; detail)
Check = Callable[[str], object]  # an option value's check: truthy when it is allowed
Problem = tuple[int, str, str]

# Programs that run code from their arguments or run another program: never a package name,
# entry point or module an allowed launcher may be pointed at.
INTERPRETERS = re.compile(
    r"^(python|pypy|node|nodejs|bun|deno|tsx|ts-node|npm|npx|pnpm|pnpx|yarn|bunx|uv|uvx|pip"
    r"|sh|bash|zsh|dash|ksh|csh|tcsh|fish|pwsh|powershell|cmd|perl|ruby|php|lua|luajit|r"
    r"|rscript|osascript|awk|gawk|mawk|nawk|sed|find|xargs|env|nohup|timeout|sudo|su|doas"
    r"|pkexec|nice|ionice|setsid|stdbuf|strace|script|exec|eval|code|ipython|jupyter)[\d.]*$",
    re.IGNORECASE,
)
_PYTHON = re.compile(r"^(python|pypy)(\d+(\.\d+)*)?$")
_NPM_PACKAGE = re.compile(
    r"^(@[a-z0-9][a-z0-9._~-]*/)?([a-z0-9][a-z0-9._~-]*)(@[A-Za-z0-9._^~<>=*+-]+)?$"
)
_PYPI_PACKAGE = re.compile(
    r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[A-Za-z0-9,._-]+\])?"
    r"((==|>=|<=|~=|@)[A-Za-z0-9._*+!-]+)?$"
)
_VERSION = re.compile(r"^[A-Za-z0-9._+-]+$")
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_IMAGE = re.compile(r"^[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9_.-]+)?(@sha256:[a-f0-9]{64})?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(=.*)?$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_DENO_FLAG = re.compile(
    r"^(--(allow|deny)-[a-z-]+(=[^\s]*)?|-A|-q|--quiet|--no-prompt|--unstable(-[a-z-]+)?)$"
)

_PACKAGE_DIRS = frozenset({"site-packages", "dist-packages", "node_modules"})
_STDLIB_DIR = re.compile(r"^(python|pypy)\d")
_SYSTEM_DIRS = ("/usr/lib/", "/usr/libexec/", "/usr/share/", "/System/", "/Library/")

_PYTHON_FLAGS = frozenset({"-u", "-B", "-s", "-I", "-O", "-OO", "-P"})
_NODE_FLAGS = frozenset({"--no-warnings", "--no-deprecation", "--enable-source-maps"})
_NPX_FLAGS = frozenset({"-y", "--yes", "-q", "--quiet"})


def program_name(command: str) -> str:
    return PurePosixPath(command.replace("\\", "/")).name


def installed_code(path: Path) -> bool:
    """True for files of installed packages or a standard library (``timeit.py``, npm's own
    ``npx-cli.js``): some evaluate their arguments, and they have a launcher of their own."""
    parts = path.parts
    if any(part in _PACKAGE_DIRS for part in parts):
        return True
    if any(a == "lib" and _STDLIB_DIR.match(b) for a, b in zip(parts, parts[1:], strict=False)):
        return True
    return str(path).startswith(_SYSTEM_DIRS)


def _script(args: list[str], i: int, cwd: str | None, suffixes: tuple[str, ...]) -> list[Problem]:
    script = args[i]
    if not script.endswith(suffixes):
        return [(i, "argument-shape", f"{script!r} is not a {'/'.join(suffixes)} script")]
    path = Path(cwd or os.getcwd()) / script
    if not path.is_file():
        return [(i, "script-not-found", f"{script!r} is not an existing file")]
    if installed_code(path.resolve()):
        return [
            (
                i,
                "installed-script",
                f"{script!r} belongs to an installed package or standard library; "
                "start packages with npx/uvx PACKAGE or python -m MODULE",
            )
        ]
    return []


def _target(args: list[str], i: int, what: str) -> list[Problem] | None:
    """Problems when args has no word at i, or it is an option; None when there is one."""
    if i >= len(args):
        return [(len(args) - 1, "argument-shape", f"{what} is missing")]
    if args[i].startswith("-"):
        return [(i, "argument-shape", f"option {args[i]!r} is not allowed here")]
    return None


def _not_interpreter(name: str, i: int, what: str) -> list[Problem]:
    if INTERPRETERS.match(name):
        return [(i, "inline-code", f"{what} {name!r} is an interpreter or command runner")]
    return []


def _npx(args: list[str], cwd: str | None) -> list[Problem]:
    i = 0
    while i < len(args) and args[i] in _NPX_FLAGS:
        i += 1
    missing = _target(args, i, "the package")
    if missing:
        return missing
    match = _NPM_PACKAGE.match(args[i])
    if not match:
        return [(i, "argument-shape", f"{args[i]!r} is not an npm package name")]
    return _not_interpreter(match.group(2), i, "package")


def _option_values(
    args: list[str], i: int, valued: Mapping[str, Check], flags: frozenset[str]
) -> tuple[int, list[Problem]]:
    """Walk options from i: flags alone, valued options with a checked value (``--x v`` or
    ``--x=v``); return the index of the first non-option word."""
    while i < len(args) and args[i].startswith("-"):
        name, eq, inline = args[i].partition("=")
        if args[i] in flags:
            i += 1
            continue
        if name not in valued:
            return i, [(i, "argument-shape", f"option {args[i]!r} is not allowed")]
        if eq:
            value, where, i = inline, i, i + 1
        elif i + 1 < len(args):
            value, where, i = args[i + 1], i + 1, i + 2
        else:
            return i, [(i, "argument-shape", f"option {name} needs a value")]
        if not valued[name](value):
            return i, [(where, "argument-shape", f"{value!r} is not allowed for {name}")]
    return i, []


def _spec(value: str) -> bool:
    match = _PYPI_PACKAGE.match(value)
    if match:
        return not INTERPRETERS.match(match.group(1))
    return value.startswith("git+https://") and not any(ch.isspace() for ch in value)


def _python_target(args: list[str], i: int, cwd: str | None, what: str) -> list[Problem]:
    missing = _target(args, i, what)
    if missing:
        return missing
    if args[i].endswith(".py"):
        return _script(args, i, cwd, (".py",))
    match = _PYPI_PACKAGE.match(args[i])
    if not match:
        return [(i, "argument-shape", f"{args[i]!r} is not a package or entry point name")]
    return _not_interpreter(match.group(1), i, what)


def _uvx(args: list[str], cwd: str | None) -> list[Problem]:
    valued: dict[str, Check] = {
        "--from": _spec,
        "--with": _spec,
        "--python": _VERSION.match,
        "-p": _VERSION.match,
    }
    i, problems = _option_values(args, 0, valued, frozenset({"-q", "--quiet"}))
    return problems or _python_target(args, i, cwd, "the package")


def _uv(args: list[str], cwd: str | None) -> list[Problem]:
    directory: list[str] = []

    def take_dir(value: str) -> bool:
        directory.append(value)
        return True

    i, problems = _option_values(args, 0, {"--directory": take_dir}, frozenset({"-q", "--quiet"}))
    if problems:
        return problems
    if i >= len(args) or args[i] != "run":
        return [(min(i, len(args) - 1), "argument-shape", "only 'uv run' starts a server")]
    valued: dict[str, Check] = {
        "--with": _spec,
        "--python": _VERSION.match,
        "-p": _VERSION.match,
        "--directory": take_dir,
    }
    flags = frozenset({"-q", "--quiet", "--frozen", "--locked", "--no-sync"})
    i, problems = _option_values(args, i + 1, valued, flags)
    base = str(Path(cwd or os.getcwd()) / directory[-1]) if directory else cwd
    return problems or _python_target(args, i, base, "the script or entry point")


def _python(args: list[str], cwd: str | None) -> list[Problem]:
    i = 0
    while i < len(args) and args[i] in _PYTHON_FLAGS:
        i += 1
    if i < len(args) and args[i] == "-m":
        if i + 1 >= len(args) or not _MODULE.match(args[i + 1]):
            return [(i, "argument-shape", "-m needs a module name")]
        module = args[i + 1]
        if not any("mcp" in part for part in module.lower().split(".")):
            return [
                (
                    i + 1,
                    "module-not-allowed",
                    f"python -m {module}: only MCP server modules (a name with 'mcp' in it) "
                    "may be run this way",
                )
            ]
        return []
    missing = _target(args, i, "the script")
    return missing or _script(args, i, cwd, (".py", ".pyz"))


def _node(args: list[str], cwd: str | None) -> list[Problem]:
    i = 0
    while i < len(args) and args[i] in _NODE_FLAGS:
        i += 1
    missing = _target(args, i, "the script")
    return missing or _script(args, i, cwd, (".js", ".mjs", ".cjs"))


def _deno(args: list[str], cwd: str | None) -> list[Problem]:
    if not args or args[0] != "run":
        return [(0 if args else -1, "argument-shape", "only 'deno run' starts a server")]
    i = 1
    while i < len(args) and _DENO_FLAG.match(args[i]):
        i += 1
    missing = _target(args, i, "the module")
    if missing:
        return missing
    if args[i].startswith(("npm:", "jsr:", "https://")):
        return []
    return _script(args, i, cwd, (".ts", ".js", ".mjs", ".tsx"))


def _docker(args: list[str], cwd: str | None) -> list[Problem]:
    if not args or args[0] != "run":
        return [(0 if args else -1, "argument-shape", "only 'docker run' starts a server")]
    valued = {"-e": _ENV_NAME.match, "--env": _ENV_NAME.match, "--name": _NAME.match}
    flags = frozenset({"-i", "--interactive", "--rm", "--init"})
    i, problems = _option_values(args, 1, valued, flags)
    if problems:
        return problems
    missing = _target(args, i, "the image")
    if missing:
        return missing
    if not _IMAGE.match(args[i]):
        return [(i, "argument-shape", f"{args[i]!r} is not an image name")]
    return []


_SHAPES: dict[str, Callable[[list[str], str | None], list[Problem]]] = {
    "npx": _npx,
    "pnpx": _npx,
    "bunx": _npx,
    "uvx": _uvx,
    "uv": _uv,
    "node": _node,
    "nodejs": _node,
    "deno": _deno,
    "docker": _docker,
    "podman": _docker,
}
LAUNCHER_NAMES = (*_SHAPES, "python")


def launcher_problems(command: str, args: list[str], cwd: str | None) -> list[Problem]:
    """How a command breaks the launcher allow-list (empty when it is an allowed shape)."""
    program = program_name(command)
    shape = _python if _PYTHON.match(program) else _SHAPES.get(program)
    if shape is None:
        return [
            (
                -1,
                "command-not-allowed",
                f"{program!r} is not an allowed MCP launcher ({', '.join(LAUNCHER_NAMES)}); "
                "start the server with --mcp-allow-any-command to run your own programs",
            )
        ]
    return shape(list(args), cwd)
