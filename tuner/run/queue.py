"""Queued work belongs to the spec that queued it (issue 24, item 4; docs/scale-out.md).

`study.ask` takes the oldest WAITING trial of the study, whichever spec queued it: after an
`--accept-changes`, a `--confirm` re-run or a retry left by the old spec would run first under
the new one, outside its search space, and could become its reference. `ask` here takes only
the queued trials it is given (the run's own spec's, `StudyReading.waiting`), oldest first,
else makes a new trial; another spec's queued work stays WAITING for a run of that spec.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import optuna

from tuner.store import optuna_adapter as adapter
from tuner.trial import TrialPoint

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
