"""The best config checked against its baseline, on any runner: one home for what the checks
that end a run share (the robustness check and which flags carry the gain, each on the
simulator and on the engine): the pair they check, one config run, the record stored."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from tuner import trial as tr
from tuner.measure.measurement import Measurement
from tuner.runners.trial_runner import TrialContext, TrialRunner
from tuner.spec.values import Params
from tuner.trial import TrialPoint

Record = TypeVar("Record")


def best_pair(points: Sequence[TrialPoint]) -> tuple[TrialPoint, TrialPoint] | None:
    """(the best config of the current spec, its baseline); None when there is no best, or
    the best is the baseline: nothing to check."""
    best, base = tr.best(points), tr.baseline_of(points)
    if best is None or base is None or best.number == base.number:
        return None
    return best, base


def config_run(runner: TrialRunner, params: Params, log_name: str | None = None) -> Measurement:
    """One config measured by the check's runner, every workload it holds; not a trial
    (number −1; `log_name`: its engine log's name, None: the planner has none)."""
    ctx = TrialContext(runner.spec.name, -1, dict(params), lambda _: None, log_name=log_name)
    return runner.measure(ctx)


def check_stored_best(
    study: tr.AttrsHolder,
    points: Sequence[TrialPoint],
    check: Callable[[TrialPoint, TrialPoint], Record],
    store: Callable[[tr.AttrsHolder, int, Record], None],
    current: Callable[[TrialPoint], Record | None] = lambda _: None,
) -> Record | None:
    """`check(best, baseline)` for the best config of the current spec, stored by
    `store(study, best.number, record)` and returned; None when `best_pair` has none.
    `current(best)`: the stored record when nothing it depends on changed, returned as it
    is, not checked again."""
    pair = best_pair(points)
    if pair is None:
        return None
    kept = current(pair[0])
    if kept is not None:
        return kept
    record = check(*pair)
    store(study, pair[0].number, record)
    return record
