"""The best config of the current spec checked against its baseline, and the record stored:
one home for the checks that end a run on the simulator (`robustness.check_best`,
`smallest_check.check_best`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tuner import trial as tr
from tuner.trial import TrialPoint

Record = TypeVar("Record")


def check_stored_best(
    study: Any,
    points: Sequence[TrialPoint],
    check: Callable[[TrialPoint, TrialPoint], Record],
    store: Callable[[Any, int, Record], None],
    current: Callable[[TrialPoint], Record | None] = lambda _: None,
) -> Record | None:
    """`check(best, baseline)` for the best config of the current spec, stored by
    `store(study, best.number, record)` and returned; None when there is no best, or the best
    is the baseline. `current(best)`: the stored record when nothing it depends on changed,
    returned as it is, not checked again."""
    best, base = tr.best(points), tr.baseline_of(points)
    if best is None or base is None or best.number == base.number:
        return None
    kept = current(best)
    if kept is not None:
        return kept
    record = check(best, base)
    store(study, best.number, record)
    return record
