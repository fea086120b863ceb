"""One owner for what a trial stores: only `tuner.trial` touches Optuna's attrs.

Every other module reads typed fields (`TrialPoint`, `TrialRecord`, `StudyRecord`) and writes
through `tuner.trial`'s encoders, so a new payload is added in one place. This scans the
source with `ast` (not text): a docstring that names an attr is fine, code that reads one is
not. The test helpers (`tuner_testing`, support/) are outside `tuner/` and not scanned: they
count raw Optuna trials without the tuner's own reading, so the tests that use them check the
tuner's reading independently.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "tuner"
OWNER = ROOT / "trial"
RAW = {"user_attrs", "system_attrs", "set_user_attr"}


def raw_attr_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of every raw attr access in a module."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in RAW:
            found.append((node.lineno, f".{node.attr}"))
        # `x.attrs.get(...)`, `x.attrs[...]`, `key in x.attrs`: the stored dict read by key
        inner = None
        if (
            isinstance(node, ast.Attribute) and node.attr in ("get", "items", "keys", "values")
        ) or isinstance(node, ast.Subscript):
            inner = node.value
        elif isinstance(node, ast.Compare) and any(
            isinstance(op, ast.In | ast.NotIn) for op in node.ops
        ):
            inner = node.comparators[0]
        if isinstance(inner, ast.Attribute) and inner.attr == "attrs":
            found.append((node.lineno, ".attrs read by key"))
    return found


def offenders(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        if path.is_relative_to(OWNER):
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        out += [f"{path.relative_to(root.parent)}:{n}: {what}" for n, what in raw_attr_uses(tree)]
    return out


def test_only_the_trial_package_touches_optuna_attrs() -> None:
    found = offenders(ROOT)
    assert not found, "raw attr access outside tuner/trial (use TrialPoint / StudyRecord):\n" + (
        "\n".join(found)
    )


@pytest.mark.parametrize(
    "code",
    [
        "t.user_attrs.get('score')",
        "study.set_user_attr('x', 1)",
        "t.system_attrs['tuner:owner']",
        "p.attrs.get('engine_s')",
        "p.attrs['engine_s']",
        "'reused_from' in p.attrs",
        "{k: v for k, v in p.attrs.items()}",
    ],
)
def test_the_scan_sees_each_raw_access(code: str) -> None:
    assert raw_attr_uses(ast.parse(code)), code


def test_the_scan_lets_typed_reads_and_docstrings_be() -> None:
    code = '"""reads t.user_attrs"""\np.record.engine_s\nstudy.enqueue_trial(x, user_attrs=r)'
    assert raw_attr_uses(ast.parse(code)) == []
