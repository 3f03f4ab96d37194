"""docs/architecture.md's map names every module of the package, each in its package's
entry, and no entry names a module or package that does not exist: the map stays true as
modules are added, renamed or removed."""

from __future__ import annotations

import re
from pathlib import Path

import vllm_mlx

PACKAGE = Path(vllm_mlx.__file__).parent
DOC = PACKAGE.parent / "docs" / "architecture.md"
ENTRY = re.compile(r"^  ((?:[\w.]+/?\s)*[\w.]+/?)(?=\s|$)")  # "  name.py", "  a/ b/"


def code_block(first_line: str) -> list[str]:
    """The lines of the doc's code block that begins with ``first_line``."""
    lines = DOC.read_text().splitlines()
    start = lines.index(first_line)
    return lines[start + 1 : lines.index("```", start)]


def entries(block: list[str]) -> dict[str, str]:
    """Each entry's name (``name.py`` or ``name/``) -> its text (the continuation lines
    indented below it included)."""
    found: dict[str, str] = {}
    names: list[str] = []
    for line in block:
        match = ENTRY.match(line)
        if match:
            names = match.group(1).split()
            for name in names:
                found[name] = ""
        for name in names:
            found[name] += " " + line
    return found


def modules(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")


def packages(folder: Path) -> list[Path]:
    return sorted(p.parent for p in folder.glob("*/__init__.py"))


def named(text: str, stem: str) -> bool:
    return re.search(rf"(?<![\w/]){re.escape(stem)}(?![\w])", text) is not None


TOP = entries(code_block("vllm_mlx/"))
SERVER = entries(code_block("server/"))


def test_every_top_level_module_and_package_has_an_entry():
    expected = {f"{m}.py" for m in modules(PACKAGE) if m != "__main__"}
    expected |= {f"{p.name}/" for p in packages(PACKAGE)}
    assert expected - set(TOP) == set(), "modules or packages missing from the map"
    assert set(TOP) - expected == set(), "map entries that name nothing in the package"


def test_every_module_is_named_in_its_package_entry():
    missing = []
    for package in packages(PACKAGE):
        if package.name == "server":
            continue
        text = TOP[f"{package.name}/"]
        for folder in [package, *packages(package)]:
            missing += [f"{folder.name}/{m}" for m in modules(folder) if not named(text, m)]
    assert missing == []


def test_every_server_module_is_named_in_the_server_map():
    server = PACKAGE / "server"
    expected = {f"{m}.py" for m in modules(server)} | {f"{p.name}/" for p in packages(server)}
    assert expected - set(SERVER) == set(), "server modules or packages missing"
    assert set(SERVER) - expected == set(), "server map entries that name nothing"
    missing = [
        f"{p.name}/{m}"
        for p in packages(server)
        for m in modules(p)
        if not named(SERVER[f"{p.name}/"], m)
    ]
    assert missing == []
