"""The size rule (`make lint`): no file in tuner/ over 400 lines, no function over 80."""

from __future__ import annotations

import ast

from tuner_testing import REPO

MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 80
PACKAGE = REPO / "tuner"


def _sources() -> list:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_rule_sees_the_package() -> None:
    assert len(_sources()) > 50  # a wrong root would check nothing and pass


def test_no_file_over_400_lines() -> None:
    long = {
        str(p.relative_to(REPO)): n
        for p in _sources()
        if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES
    }
    assert not long, f"files over {MAX_FILE_LINES} lines (split them): {long}"


def test_no_function_over_80_lines() -> None:
    long = {}
    for p in _sources():
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                n = node.end_lineno - start + 1
                if n > MAX_FUNCTION_LINES:
                    long[f"{p.relative_to(REPO)}:{node.lineno} {node.name}"] = n
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split them): {long}"
