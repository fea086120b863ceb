"""One read model: only `tuner.trial.reading` reads a study's trials from Optuna.

Every other module asks `read_study` (and the few that need Optuna's own trials or their count,
`frozen_trials` and `trial_count`), so "read the study, judge it under the current spec" is
built once. This scans the source with `ast`: a docstring that names `get_trials` is fine, code
that calls it is not. `tuner.store.optuna_adapter` may read one trial's stored state by id
(`get_trial`, to know whether a handle was already told): it writes, it reads no study.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "tuner"
READ_MODEL = ROOT / "trial" / "reading.py"
# Optuna's ways of reading a study's trials: Study's and storage's
READS = {
    "get_trials",
    "best_trial",
    "best_trials",
    "best_value",
    "best_params",
    "trials_dataframe",
    "get_all_trials",
    "get_best_trial",
    "get_trial",
    "get_n_trials",
}
ALLOWED = {(ROOT / "store" / "optuna_adapter.py", "get_trial")}
# `.trials` is a common field name (a fit's trial numbers, `--trials`): read off a study only
ON_A_STUDY = "trials"


def _names_a_study(node: ast.expr, modules: set[str]) -> bool:
    """A study object, not a module named `study` (`commands.study.trials`, the command)."""
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return name.endswith("study") and name not in modules


def _imported(tree: ast.AST) -> set[str]:
    return {
        (a.asname or a.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for a in node.names
    }


def trial_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of every attribute access that reads trials the Optuna way."""
    modules = _imported(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        if node.attr in READS or (node.attr == ON_A_STUDY and _names_a_study(node.value, modules)):
            found.append((node.lineno, node.attr))
    return found


def offenders(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        if path == READ_MODEL:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        out += [
            f"{path.relative_to(root.parent)}:{n}: .{name}"
            for n, name in trial_reads(tree)
            if (path, name) not in ALLOWED
        ]
    return out


def test_only_the_read_model_reads_trials_from_optuna() -> None:
    found = offenders(ROOT)
    assert not found, "Optuna trial reads outside tuner/trial/reading.py:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "code",
    [
        "study.get_trials(deepcopy=False)",
        "len(study.trials)",
        "len(self.study.trials)",
        "study.best_trial.number",
        "storage.get_all_trials(study_id)",
        "s._storage.get_trial(trial_id)",
        "frame = study.trials_dataframe()",
    ],
)
def test_the_scan_finds_each_way_of_reading(code: str) -> None:
    assert trial_reads(ast.parse(code))


def test_the_scan_passes_words_and_other_names() -> None:
    code = (
        '"""calls get_trials once"""\nfrom tuner.commands import study\n'
        "opts.trials\ncal.trials\nstudy.trials\nread_study(study).current()\n"
    )
    assert trial_reads(ast.parse(code)) == []
