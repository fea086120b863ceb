"""Queued work belongs to the spec that queued it (issue 24, item 4; docs/scale-out.md).

`study.ask` takes the oldest WAITING trial of the study, whichever spec queued it: after an
`--accept-changes`, a `--confirm` re-run or a retry left by the old spec would run first under
the new one, outside its search space, and could become its reference. `ask` here takes only
the queued trials it is given (the run's own spec's, `StudyReading.waiting`), oldest first,
else makes a new trial; another spec's queued work stays WAITING for a run of that spec.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import optuna

from tuner.spec.values import Params
from tuner.store import optuna_adapter as adapter
from tuner.trial import TrialPoint, TrialRecord, params_key

# Taking a WAITING trial reads then updates its row: atomic on PostgreSQL (a row lock), not on
# SQLite, which ignores FOR UPDATE. One process runs a SQLite study (the lock), so serializing
# its GPU slots' asks here makes taking a queued trial atomic there too.
_ASK_LOCK = threading.Lock()


def ask(study: optuna.Study, waiting: Sequence[TrialPoint]) -> optuna.Trial:
    """The oldest of `waiting` that no other worker took first, else a new trial: RUNNING,
    ours to end."""
    with _ASK_LOCK:
        for p in sorted(waiting, key=lambda p: p.number):
            trial = adapter.take_waiting(study, p.number)
            if trial is not None:
                return trial
        return adapter.new_trial(study)


def queue_warm_starts(
    points: Callable[[], Sequence[TrialPoint]],
    configs: Sequence[tuple[str, Params]],
    host: str | None,
    say: Callable[[str], None],
    enqueue: Callable[[Params, TrialRecord], None],
) -> None:
    """Queue `--from-plan` / `--warm-start` configs (source, params), each once per
    measurement: a config that a trial of this measurement already has (measured, stopped,
    queued or running) is skipped with one line saying which trial. One measured only under
    an older spec (before `--accept-changes`) is queued: it must be measured under this one.
    `points`: this measurement's trials, read only when there are configs."""
    for source, params in configs:
        key = params_key(params)
        there = [p for p in points() if p.state != "FAIL" and params_key(p.params) == key]
        if there:
            what = "queued" if there[0].state == "WAITING" else there[0].status
            say(f"skipped {source}: its config is trial {there[0].number} ({what}) already")
            continue
        enqueue(params, TrialRecord(warm_start=source, host=host))
