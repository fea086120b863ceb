"""The package's long files and functions, as a report (`make lint` prints it; House IV): a
long file or function is a question to read for (one meaning or two?), not a rule to meet
from below. `tests/test_code_size.py` keeps only a backstop far above the report's lines.

    .venv/bin/python -m tuner_testing.code_size
"""

from __future__ import annotations

import ast
from pathlib import Path

from tuner_testing.cli import REPO

PACKAGE = REPO / "tuner"
READ_FILE_LINES = 400  # reported: read it for meaning
READ_FUNCTION_LINES = 80


def sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def long_files(limit: int) -> dict[str, int]:
    """Files of `tuner/` over `limit` lines: path -> lines."""
    return {
        str(p.relative_to(REPO)): n
        for p in sources()
        if (n := len(p.read_text().splitlines())) > limit
    }


def long_functions(limit: int) -> dict[str, int]:
    """Functions of `tuner/` over `limit` lines (decorators included): `path:line name` ->
    lines."""
    long = {}
    for p in sources():
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                n = (node.end_lineno or node.lineno) - start + 1
                if n > limit:
                    long[f"{p.relative_to(REPO)}:{node.lineno} {node.name}"] = n
    return long


def main() -> None:
    files, functions = long_files(READ_FILE_LINES), long_functions(READ_FUNCTION_LINES)
    print(
        f"code size (a report, not a gate): {len(files)} file(s) over {READ_FILE_LINES} lines, "
        f"{len(functions)} function(s) over {READ_FUNCTION_LINES}: read each for one meaning"
    )
    for name, n in sorted({**files, **functions}.items(), key=lambda kv: -kv[1]):
        print(f"  {n:5d}  {name}")


if __name__ == "__main__":
    main()
