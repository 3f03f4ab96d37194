"""The server package's layering, read from the source: a surface never imports another,
operations import no surface, imports of the package's own modules sit at module level
(the CLI entry points excepted). The 600-line limit is the whole package's
(tests/test_layers.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import vllm_mlx.server

SERVER = Path(vllm_mlx.server.__file__).parent
SURFACES = ("openai", "anthropic", "responses", "ollama", "llamacpp")
ENTRY_POINTS = {"serve_command.py", "cli_ranks.py", "launch.py"}


def imported(path: Path) -> list[tuple[str, bool]]:
    """(absolute module name, at module level) for each vllm_mlx import in ``path``."""
    package = "vllm_mlx." + ".".join(path.relative_to(SERVER.parent).with_suffix("").parts[:-1])
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    type_checking = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_checking |= {id(n) for n in ast.walk(node)}
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or id(node) in type_checking:
            continue
        if node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            name = ".".join(base + ([node.module] if node.module else []))
        else:
            name = node.module or ""
        if name.startswith("vllm_mlx"):
            out.append((name, id(node) in top))
    return out


def modules() -> list[Path]:
    return sorted(SERVER.rglob("*.py"))


def test_surfaces_do_not_import_each_other_and_ops_imports_none():
    for path in modules():
        part = path.relative_to(SERVER).parts[0]
        for name, _ in imported(path):
            target = name.removeprefix("vllm_mlx.server.").split(".")[0]
            if part in SURFACES:
                assert target == part or target not in SURFACES, (path, name)
            if part == "ops":
                assert target not in (*SURFACES, "mcp"), (path, name)


def test_no_function_local_imports_of_the_package_outside_entry_points():
    for path in modules():
        if path.name in ENTRY_POINTS:
            continue
        local = [name for name, at_top in imported(path) if not at_top]
        assert not local, (path, local)
