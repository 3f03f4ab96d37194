"""The package's import layers, read from the source with ``ast``.

Each top-level part (subpackage or root module) sits in a layer; a part may import only parts
in lower layers, never one beside or above it. No module-level import cycle, and no
function-local import of the package's own modules outside the command-line entry points
(where it keeps ``--help`` from loading MLX): such an import is how a cycle gets hidden.
And no module over 600 lines: a part stays small modules with one job each.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = "vllm_mlx"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

# Lowest first. What each layer is for is in docs/architecture.md.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("families", "protocols"),  # the family vocabulary; the protocol types layers share
    ("reasoning", "tool_parsers", "constrained", "engine", "mcp", "embeddings"),
    ("native", "distributed"),  # CPU kernels (engine.cpu); sharding over mlx.distributed
    ("models",),  # loading routes quantized layers to native
    ("chat", "request"),  # output stream, prompt rendering, thinking switch; the request
    ("options",),  # the server's options, one frozen dataclass per concern
    ("pipeline",),
    ("runtime",),
    ("fleet",),  # several models: catalog, per-model settings, the pool that loads them
    ("llm", "server", "bench_plot"),
    ("bench", "cli"),
    ("__main__", "__init__"),
)
# Command-line entry points (paths inside the package): lazy imports allowed, so `--help`
# loads no MLX (and `serve` imports mlx_lm only after raising its open-file limit).
ENTRY_POINTS = {
    "cli.py",
    "bench.py",
    "__main__.py",
    "server/launch.py",
    "server/serve_command.py",  # the `serve` command
    "server/cli_ranks.py",  # `serve --distributed`
    "chat/parse_cli.py",
}


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported module of the package
    line: int
    local: bool  # inside a function
    path: str  # the importing file, relative to the package


def _module_of(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([root.name, *parts])


def scan(root: Path) -> list[Import]:
    """Every import of the package's own modules in the package under ``root``."""
    files = sorted(root.rglob("*.py"))
    modules = {_module_of(f, root) for f in files}
    found = []
    for path in files:
        module = _module_of(path, root)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node, local in _walk(tree, False):
            for target in _targets(node, package, modules):
                if target == root.name or target.startswith(root.name + "."):
                    found.append(Import(module, target, node.lineno, local, rel))
    return found


def _walk(node: ast.AST, local: bool):
    """Every node with whether it sits inside a function."""
    for child in ast.iter_child_nodes(node):
        yield child, local
        inner = local or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        yield from _walk(child, inner)


def _targets(node: ast.AST, package: str, modules: set[str]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = package.split(".")[: len(package.split(".")) - node.level + 1]
        base_name = ".".join([*base, *([node.module] if node.module else [])])
    else:
        base_name = node.module or ""
    # `from pkg import sub` imports the submodule when there is one
    subs = [f"{base_name}.{a.name}" for a in node.names if f"{base_name}.{a.name}" in modules]
    return subs or [base_name]


def part_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer_of(part: str) -> int:
    for level, parts in enumerate(LAYERS):
        if part in parts:
            return level
    raise AssertionError(f"part {part!r} has no layer in tests/test_layers.py LAYERS")


def upward_imports(imports: list[Import]) -> list[str]:
    """Imports of a part in the same or a higher layer."""
    bad = []
    for imp in imports:
        src, dst = part_of(imp.source), part_of(imp.target)
        if src != dst and layer_of(dst) >= layer_of(src):
            bad.append(f"{imp.path}:{imp.line}: {src} imports {dst} ({imp.target})")
    return bad


def local_imports(imports: list[Import]) -> list[str]:
    return [
        f"{imp.path}:{imp.line}: function-local import of {imp.target}"
        for imp in imports
        if imp.local and imp.path not in ENTRY_POINTS
    ]


def cycles(imports: list[Import]) -> list[str]:
    """Module-level import cycles, one line per cycle."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        if not imp.local and imp.target != imp.source:
            graph.setdefault(imp.source, set()).add(imp.target)
    found, done = [], set()
    for start in sorted(graph):
        stack = [(start, [start])]
        seen = {start}
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph.get(node, ())):
                if nxt == start and frozenset(path) not in done:
                    done.add(frozenset(path))
                    found.append(" -> ".join([*path, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    return found


@pytest.fixture(scope="module")
def package_imports() -> list[Import]:
    return scan(ROOT)


def test_every_part_has_a_layer():
    parts = {p.stem for p in ROOT.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    for part in parts:
        layer_of(part)


def test_no_part_imports_beside_or_above_itself(package_imports):
    assert upward_imports(package_imports) == []


def test_no_function_local_imports_outside_entry_points(package_imports):
    assert local_imports(package_imports) == []


def test_no_import_cycles(package_imports):
    assert cycles(package_imports) == []


def test_the_checks_catch_each_violation(tmp_path):
    """A package with one of each fault: every check reports it."""
    pkg = tmp_path / PACKAGE
    for folder in ("families", "chat", "tool_parsers"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "families" / "a.py").write_text("from vllm_mlx.chat import b\n")  # upward
    (pkg / "chat" / "b.py").write_text("from vllm_mlx.families import a\n")  # closes a cycle
    (pkg / "tool_parsers" / "c.py").write_text(
        "def f():\n    from vllm_mlx.tool_parsers import d\n"
    )
    (pkg / "tool_parsers" / "d.py").write_text("from . import c\n")
    imports = scan(pkg)
    assert upward_imports(imports) == ["families/a.py:1: families imports chat (vllm_mlx.chat.b)"]
    assert local_imports(imports) == [
        "tool_parsers/c.py:2: function-local import of vllm_mlx.tool_parsers.d"
    ]
    assert cycles(imports) == ["vllm_mlx.chat.b -> vllm_mlx.families.a -> vllm_mlx.chat.b"]


def test_no_module_over_600_lines():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in ROOT.rglob("*.py")}
    assert {path: n for path, n in sizes.items() if n > 600} == {}
