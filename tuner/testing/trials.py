"""What several workers stored, counted from Optuna's raw trials (independently of the tuner's
own reading, so the tests check it)."""

from __future__ import annotations

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
            if a.datetime_start < b.datetime_complete and b.datetime_start < a.datetime_complete:
                pairs += 1
    return pairs
