"""What several workers stored, counted from Optuna's raw trials (independently of the tuner's
own reading, so the tests check it)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any


def launched(trials: list[Any]) -> list[Any]:
    """The trials that launched an engine (not a reused result, not refused before launch)."""
    return [
        t
        for t in trials
        if t.datetime_complete is not None
        and "reused_from" not in t.user_attrs
        and not t.user_attrs.get("predicted")
        and t.user_attrs.get("engine_s")
    ]


def counted(trials: list[Any]) -> int:
    """Trials that count toward `budget.n_trials`: ended, not interrupted, not reused."""
    return sum(
        1
        for t in trials
        if t.state.is_finished()
        and t.user_attrs.get("failure_kind") != "interrupted"
        and "reused_from" not in t.user_attrs
    )


def measured_at_once(trials: list[Any]) -> int:
    """Pairs of trials that measured one config at overlapping times (must be 0); two hosts'
    baselines are their own configs."""
    runs = launched(trials)
    pairs = 0
    for i, a in enumerate(runs):
        for b in runs[i + 1 :]:
            if a.params != b.params:
                continue
            if a.user_attrs.get("baseline") and a.user_attrs.get("host") != b.user_attrs.get(
                "host"
            ):
                continue
            if _engine_from(a) < b.datetime_complete and _engine_from(b) < a.datetime_complete:
                pairs += 1
    return pairs


def _engine_from(t: Any) -> Any:
    """When the trial's engine started: its end less its engine time (`engine_s`). Not
    `datetime_start`: a worker asks for its trial, then may wait on another's claim of the
    same config (a dead worker's, until a survivor ends that trial) before it launches."""
    return max(t.datetime_start, t.datetime_complete - timedelta(seconds=t.user_attrs["engine_s"]))
