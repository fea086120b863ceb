"""Warm starts: the best configs of another stored study, queued as this study's first trials.

`tuner run --from-plan K` takes the top K of the study's own `tuner plan` (its `-simulated`
study); `--warm-start OTHER K` the top K of any stored study (the same box before a vLLM
upgrade). Configs are ranked as `tuner best` ranks them (`tuner.trial.ranked`); a config
outside this study's search space, or vLLM's defaults (the baseline runs first anyway), is
skipped. Optuna then measures each one for real: the
other study's figures are never copied in.
"""

from __future__ import annotations

from typing import Any

from tuner import trial as tr
from tuner.errors import UserError
from tuner.spec.space import baseline_params
from tuner.spec.study import StudySpec
from tuner.store.storage import Store
from tuner.trial import specs


def top_configs(
    store: Store, source: str, k: int, spec: StudySpec, *, plan: bool = False
) -> list[tuple[str, dict[str, Any]]]:
    """(label, params) of the best `k` feasible trials of study `source` that fit `spec`'s
    search space, best first."""
    if source not in store.study_names():
        if plan:
            raise UserError(
                f"--from-plan: no plan study {source!r} in {store.url}: run `tuner plan` on "
                "this study file first"
            )
        raise UserError(f"--warm-start: no study named {source!r} in {store.url}")
    study = store.load_study(source)
    points = specs.of_current(
        tr.StudyRecord.of(study), tr.read_all(study.get_trials(deepcopy=False))
    )
    out: list[tuple[str, dict[str, Any]]] = []
    base = baseline_params(spec.search_space)  # measured first anyway
    for p in tr.ranked(points):
        if len(out) >= k:
            break
        if p.params == base or any(p.params == params for _, params in out):
            continue
        if fits(spec, p.params):
            out.append((f"{source} trial {p.number}", dict(p.params)))
    if not out:
        what = "--from-plan" if plan else "--warm-start"
        raise UserError(
            f"{what}: study {source!r} has no feasible trial whose config fits this search space"
        )
    return out


def fits(spec: StudySpec, params: dict[str, Any]) -> bool:
    """The same parameters as this study's space, each value inside its range."""
    space = spec.search_space.parameters
    if set(params) != set(space):
        return False
    for name, value in params.items():
        p = space[name]
        if p.type == "int" and (not isinstance(value, int) or isinstance(value, bool)):
            return False
        if not p.contains(value):
            return False
    return True
