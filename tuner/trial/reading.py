"""The read model: the one module that reads a stored study's trials from Optuna.

`read_study` reads a study once (its attrs as a `StudyRecord`, every trial as a pooled
`TrialPoint`) and the result answers what every reader asks of it: the trials of the
study's current spec (`current`: `best`, `export`, `report`, `pareto`, warm starts), every
trial under its own judging (`judged_all`: `tuner trials`), the trials of one spec
(`of_spec`: the loop's `run.reading.StudyReading`). The few readers that need Optuna's own
`FrozenTrial` (parameter importance, recovery's RUNNING trials) or only the count (the
sampler's seed offset) ask here too. `tests/test_read_model.py` holds every other module of
`tuner` to it.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tuner.trial import specs
from tuner.trial.point import TrialPoint, read
from tuner.trial.ranking import read_all
from tuner.trial.study import StudyRecord

if TYPE_CHECKING:
    import optuna


@dataclass(frozen=True)
class StudyRead:
    """One read of a stored study: its attrs and every trial (scores pooled over re-runs)."""

    record: StudyRecord
    every: list[TrialPoint]
    # Each answer below, judged once per read (the loop asks several times per trial)
    _judged: dict[tuple[str, str | None], list[TrialPoint]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def _once(
        self, key: tuple[str, str | None], judge: Callable[[], list[TrialPoint]]
    ) -> list[TrialPoint]:
        if key not in self._judged:
            self._judged[key] = judge()
        return list(self._judged[key])  # the caller's own list

    def current(self) -> list[TrialPoint]:
        """The trials of the study's current spec: what results read (never across specs)."""
        return self._once(("current", None), lambda: specs.of_current(self.record, self.every))

    def judged_all(self) -> list[TrialPoint]:
        """Every trial, each judged under its own measurement's latest judging."""
        return self._once(("all", None), lambda: specs.judged_all(self.record, self.every))

    def of_spec(self, spec_id: str) -> list[TrialPoint]:
        """The trials of spec `spec_id`, and the queued ones it may take."""
        return self._once(
            ("spec", spec_id), lambda: specs.of_spec(self.record, self.every, spec_id)
        )


_FINISHED = ("COMPLETE", "FAIL", "PRUNED")  # Optuna's finished states, by name


class FinishedTrials:
    """Each finished trial read once, for a reader that reads the same study again and again
    (the loop: twice per trial). Optuna's cached storage never reads a finished trial again:
    every read hands back the same `FrozenTrial` object, so a point read from that object is
    still right; a trial read anew (unfinished, or from another storage) is a new object and
    is read anew."""

    def __init__(self) -> None:
        self._read: dict[int, tuple[optuna.trial.FrozenTrial, TrialPoint]] = {}

    def read(self, trial: optuna.trial.FrozenTrial) -> TrialPoint:
        known = self._read.get(trial.number)
        if known is not None and known[0] is trial:
            return known[1]
        point = read(trial)
        if trial.state.name in _FINISHED:
            self._read[trial.number] = (trial, point)
        return point


def read_study(study: optuna.Study, known: FinishedTrials | None = None) -> StudyRead:
    """Read `study` once: its attrs, then its trials (two storage reads); `known`: the
    finished trials read before, not decoded again."""
    record = StudyRecord.of(study)
    trials = study.get_trials(deepcopy=False)
    every = read_all(trials, known.read) if known is not None else read_all(trials)
    return StudyRead(record, every)


def frozen_trials(
    study: optuna.Study, states: Container[optuna.trial.TrialState] | None = None
) -> list[optuna.trial.FrozenTrial]:
    """Optuna's own stored trials (in `states`, None: all), for the readers that need its
    params' distributions or a writable handle: never copied."""
    return study.get_trials(deepcopy=False, states=states)


def trial_count(study: optuna.Study) -> int:
    """How many trials the study holds, in every state."""
    return len(study.get_trials(deepcopy=False))
