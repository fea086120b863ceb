"""Docs that cannot drift: every module of `tuner` is named in its package's `__init__` (the
docstring's list of modules, one line each: the one place for them), every package has its row
in docs/architecture.md ("The packages"), and architecture.md names no module that is gone. Pure
file reading, no imports of the tuner."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tuner_testing import REPO

PACKAGE = REPO / "tuner"
ARCHITECTURE = REPO / "docs" / "architecture.md"
ROW = re.compile(r"^\| (`[a-z_.]+`(?:, `[a-z_.]+`)*)", re.MULTILINE)  # architecture.md's table rows


def packages() -> list[Path]:
    return sorted(p.parent for p in PACKAGE.rglob("__init__.py"))


def members(package: Path) -> list[str]:
    """The modules and subpackages of one package, by their short names."""
    modules = [p.stem for p in package.glob("*.py") if p.stem != "__init__"]
    return sorted(modules + [p.name for p in package.iterdir() if (p / "__init__.py").exists()])


def dotted(package: Path, name: str) -> str:
    """`sim.engine` for tuner/sim/engine.py; `cli` for tuner/cli.py."""
    return ".".join([*package.relative_to(PACKAGE).parts, name])


def named_in(text: str, name: str) -> bool:
    """`name` written as code: `name`, `name.Thing`, `name/` or `name(...)`."""
    return re.search(rf"`{re.escape(name)}[`./(]", text) is not None


def test_the_checks_see_the_package() -> None:
    assert len(packages()) > 15 and sum(len(members(p)) for p in packages()) > 150


def test_every_module_is_in_its_package_s_init_list() -> None:
    missing = []
    for package in packages():
        doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
        missing += [dotted(package, m) for m in members(package) if not named_in(doc, m)]
    assert missing == [], f"not named in their package's __init__ docstring: {missing}"


def test_every_package_has_its_line_in_the_architecture_and_no_line_is_stale() -> None:
    page = ARCHITECTURE.read_text()
    table = page[page.index("## The packages") :].split("\n## ", 1)[0]
    entries = [n for row in ROW.findall(table) for n in re.findall(r"`([a-z_.]+)`", row)]
    modules = {dotted(p, m) for p in packages() for m in members(p)}
    top = {m for m in modules if "." not in m}
    assert sorted(top - set(entries)) == [], "top-level modules without a line in architecture.md"
    assert sorted(set(entries) - modules) == [], "architecture.md lines for no module"
    assert len(entries) == len(set(entries)), "a module with two lines in architecture.md"
