"""Warm starts: the best configs of another stored study, queued as this study's first trials.

`tuner run --from-plan K` (the study's own `tuner plan`) and `--warm-start OTHER K` (any stored
study); what each takes, what it skips and why, and which plans are refused:
docs/multi-fidelity.md, "Warm starts", and docs/reliability.md (`--from-plan`).

What callers may assume: configs are ranked by `tuner.trial.ranked` (the order of `tuner best`),
a plan's trials under this file's judging; each skip is said in one line (`skipped`); a queued
config is measured for real, none of the other study's figures is copied in; a plan made under
another measurement (`tuner.trial.specs.changes`) is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tuner import trial as tr
from tuner.errors import UserError
from tuner.spec.space import baseline_params
from tuner.spec.study import StudySpec
from tuner.spec.values import Params
from tuner.store.storage import Store
from tuner.trial import scoring, specs
from tuner.trial.reading import read_study


def top_configs(
    store: Store,
    source: str,
    k: int,
    spec: StudySpec,
    *,
    plan: bool = False,
    skipped: list[str] | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """(label, params) of the best `k` feasible trials of study `source` that fit `spec`'s
    search space, best first; why each better one was passed over, appended to `skipped`."""
    what = "--from-plan" if plan else "--warm-start"
    if source not in store.study_names():
        if plan:
            raise _no_plan(source, store.url)
        raise UserError(f"--warm-start: no study named {source!r} in {store.url}")
    study = store.load_study(source)
    read = read_study(study)
    record, points = read.record, read.current()
    if plan:
        _same_measurement(record, spec, source)
        points = scoring.rejudge(points, spec, specs.judging_id(spec))
    out = warm_configs(points, source, k, spec, what, skipped)
    if not out:
        raise UserError(
            f"{what}: study {source!r} has no feasible trial whose config fits this search space"
        )
    return out


def warm_configs(
    points: Sequence[tr.TrialPoint],
    source: str,
    k: int,
    spec: StudySpec,
    what: str = "--warm-start",
    skipped: list[str] | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """`top_configs` of the trials `points` of study `source` (its current spec's): none when
    it has no feasible config but vLLM's defaults that fits `spec`'s space (`tuner verify`
    proposes a warm start only from a study that has one)."""
    out: list[tuple[str, dict[str, Any]]] = []
    notes = skipped if skipped is not None else []
    base = baseline_params(spec.search_space)  # measured first anyway
    for p in tr.ranked(points):
        if len(out) >= k:
            break
        label = f"{source} trial {p.number}"
        if p.params == base:
            notes.append(f"{what}: skipped {label}: vLLM's defaults (the baseline runs anyway)")
        elif any(p.params == params for _, params in out):
            continue  # the same config again (a reused result)
        elif not fits(spec, p.params):
            notes.append(f"{what}: skipped {label}: its config is outside this search space")
        else:
            out.append((label, dict(p.params)))
    return out


def _same_measurement(record: tr.StudyRecord, spec: StudySpec, source: str) -> None:
    """A plan made under another measurement predicted other trials: refuse it, one line."""
    if record.spec is None:
        return
    diff = specs.changes(record.spec, spec.model_dump())
    if diff:
        shown = "; ".join(diff[: specs.SHOWN_CHANGES])
        more = (
            f" (and {len(diff) - specs.SHOWN_CHANGES} more)" if diff[specs.SHOWN_CHANGES :] else ""
        )
        raise UserError(
            f"--from-plan: plan study {source!r} was made under another study file ({shown}"
            f"{more}): run `tuner plan` on this study file again (with --accept-changes)"
        )


def check_sources(
    url: str, spec: StudySpec, from_plan: int | None, warm_start: tuple[str, int] | None
) -> None:
    """What `--from-plan K` and `--warm-start STUDY K` would queue, found (or refused) on a
    read-only store before `tuner run` creates its database: a failed start writes nothing."""
    if from_plan is None and warm_start is None:
        return
    if warm_start is not None and warm_start[1] < 1:
        raise UserError(f"--warm-start: K must be at least 1, not {warm_start[1]}")
    try:
        store = Store(url, readonly=True)
    except UserError:  # no database yet (or none readable): no study to start from
        if from_plan is not None:
            raise _no_plan(specs.study_name(spec, True), url) from None
        assert warm_start is not None
        raise UserError(f"--warm-start: no study named {warm_start[0]!r} in {url}") from None
    try:
        if from_plan is not None:
            top_configs(store, specs.study_name(spec, True), from_plan, spec, plan=True)
        if warm_start is not None:
            top_configs(store, warm_start[0], warm_start[1], spec)
    finally:
        store.close()


def _no_plan(source: str, url: str) -> UserError:
    return UserError(
        f"--from-plan: no plan study {source!r} in {url}: run `tuner plan` on this study file first"
    )


def fits(spec: StudySpec, params: Params) -> bool:
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
