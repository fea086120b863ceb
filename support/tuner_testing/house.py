"""The house's figures, counted from the code (`make lint` prints them; docs/architecture.md
quotes them from here, never by hand):

- who imports `StudySpec` (below the loop, code takes the section it uses);
- where the objective's mode is tested by name, and its capabilities asked, outside the
  objective package (the objective object decides; others ask it);
- the objective object's width (public methods and class flags);
- lines that say `Any`;
- module docstrings that repeat docs/ (a sentence sharing a run of 8 words with a page).

    .venv/bin/python -m tuner_testing.house
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tuner_testing.cli import REPO

PACKAGE = REPO / "tuner"
DOCS = REPO / "docs"
# The objective package (docs/architecture.md, "One object per decision"): the object, its words,
# the capacity search and the scoring that packs the runs it judges.
OBJECTIVE_PACKAGE = frozenset(
    {
        "tuner.measure.objective",
        "tuner.measure.modes",
        "tuner.measure.mixes",
        "tuner.measure.mode_words",
        "tuner.measure.capacity",
        "tuner.trial.scoring",
    }
)
RUN_WORDS = 8  # a docstring sentence "repeats docs/" when it shares this many words in a row
# A test of the mode by name: `<x>.mode == "capacity"` and its kin (`!=`, `in`).
_MODE_BY_NAME = re.compile(
    r"""\bmode \s*(==|!=)\s*["'](scalar|multi|capacity)["']"""
    r"""|\bmode in \(?\s*["'](scalar|multi|capacity)["']"""
    r"""|get \( ["']mode["'] \) (==|!=)"""
)
_CAPABILITY = re.compile(r"\bhas_capacity\b|\bcapacity is (not )?None\b|\.scenarios\b")
_WORD = re.compile(r"[a-z0-9]+(?:['_-][a-z0-9]+)*")


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    text: str
    tree: ast.Module


def modules() -> Iterator[Module]:
    for p in sorted(PACKAGE.rglob("*.py")):
        parts = p.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        text = p.read_text()
        yield Module(name, p, text, ast.parse(text, str(p)))


def imports_name(m: Module, name: str) -> bool:
    """Whether the module's code imports `name` (TYPE_CHECKING imports count)."""
    return any(
        isinstance(node, ast.ImportFrom) and any(a.name == name for a in node.names)
        for node in ast.walk(m.tree)
    )


def code_lines(m: Module, pattern: re.Pattern[str]) -> list[int]:
    """Lines of code matching `pattern`, comments and docstrings left out (a docstring that names
    a thing is not code asking it)."""
    docstrings: set[int] = set()
    for node in ast.walk(m.tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            docstrings.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    lines: dict[int, list[str]] = {}
    for tok in tokenize.generate_tokens(io.StringIO(m.text).readline):
        if tok.type != tokenize.COMMENT and tok.start[0] not in docstrings:
            lines.setdefault(tok.start[0], []).append(tok.string)
    return [i for i, toks in sorted(lines.items()) if pattern.search(" ".join(toks))]


def objective_width() -> tuple[int, int]:
    """The objective object's public methods and class flags (`measure.modes.Objective`)."""
    tree = ast.parse((PACKAGE / "measure" / "modes.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Objective")
    methods = sum(isinstance(n, ast.FunctionDef) and not n.name.startswith("_") for n in cls.body)
    flags = sum(
        isinstance(n, ast.AnnAssign) and "ClassVar[bool]" in ast.unparse(n.annotation)
        for n in cls.body
    )
    return methods, flags


def _runs(words: list[str]) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + RUN_WORDS]) for i in range(len(words) - RUN_WORDS + 1)}


def repeated_sentences() -> tuple[int, int, dict[str, int]]:
    """Module-docstring sentences sharing a run of `RUN_WORDS` words with docs/*.md: (repeated,
    all, repeated per module)."""
    docs: set[tuple[str, ...]] = set()
    for page in DOCS.glob("*.md"):
        docs |= _runs(_WORD.findall(page.read_text().lower()))
    repeated, total = 0, 0
    per_module: dict[str, int] = {}
    for m in modules():
        doc = ast.get_docstring(m.tree) or ""
        for sentence in re.split(r"(?<=[.:;])\s+", " ".join(doc.split())):
            words = _WORD.findall(sentence.lower())
            if len(words) < RUN_WORDS:
                continue
            total += 1
            if _runs(words) & docs:
                repeated += 1
                per_module[m.name] = per_module.get(m.name, 0) + 1
    return repeated, total, per_module


def main() -> None:
    mods = list(modules())
    spec_users = [m.name for m in mods if imports_name(m, "StudySpec")]
    outside = [m for m in mods if m.name not in OBJECTIVE_PACKAGE]
    by_name = {m.name: n for m in outside if (n := len(code_lines(m, _MODE_BY_NAME)))}
    capabilities = {m.name: n for m in outside if (n := len(code_lines(m, _CAPABILITY)))}
    methods, flags = objective_width()
    any_lines = sum(len(code_lines(m, re.compile(r"\bAny\b"))) for m in mods)
    repeated, sentences, per_module = repeated_sentences()
    lines = sum(len(m.text.splitlines()) for m in mods)
    print(f"the house (`python -m tuner_testing.house`): {len(mods)} modules, {lines} lines")
    print(f"  StudySpec imported by {len(spec_users)} modules")
    print(
        f"  the objective's mode tested by name in {len(by_name)} modules outside its package: "
        + ", ".join(f"{k} ({v})" for k, v in sorted(by_name.items()))
    )
    print(
        f"  its capabilities asked in {len(capabilities)} modules outside its package: "
        + ", ".join(f"{k} ({v})" for k, v in sorted(capabilities.items()))
    )
    print(f"  the objective object: {methods} public methods and {flags} class flags")
    print(f"  lines of code that say Any: {any_lines}")
    share = 100 * repeated / max(sentences, 1)
    top = sorted(per_module.items(), key=lambda kv: -kv[1])[:8]
    print(
        f"  module-docstring sentences repeating docs/ ({RUN_WORDS}-word runs): {repeated} of "
        f"{sentences} ({share:.0f} %); most: " + ", ".join(f"{k} ({v})" for k, v in top)
    )


if __name__ == "__main__":
    main()
