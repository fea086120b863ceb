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

from collections.abc import Container
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuner.trial import specs
from tuner.trial.point import TrialPoint
from tuner.trial.ranking import read_all
from tuner.trial.study import StudyRecord

if TYPE_CHECKING:
    import optuna


@dataclass(frozen=True)
class StudyRead:
    """One read of a stored study: its attrs and every trial (scores pooled over re-runs)."""

    record: StudyRecord
    every: list[TrialPoint]

    def current(self) -> list[TrialPoint]:
        """The trials of the study's current spec: what results read (never across specs)."""
        return specs.of_current(self.record, self.every)

    def judged_all(self) -> list[TrialPoint]:
        """Every trial, each judged under its own measurement's latest judging."""
        return specs.judged_all(self.record, self.every)

    def of_spec(self, spec_id: str) -> list[TrialPoint]:
        """The trials of spec `spec_id`, and the queued ones it may take."""
        return specs.of_spec(self.record, self.every, spec_id)


def read_study(study: optuna.Study) -> StudyRead:
    """Read `study` once: its attrs, then its trials (two storage reads)."""
    record = StudyRecord.of(study)
    return StudyRead(record, read_all(study.get_trials(deepcopy=False)))


def frozen_trials(
    study: optuna.Study, states: Container[optuna.trial.TrialState] | None = None
) -> list[optuna.trial.FrozenTrial]:
    """Optuna's own stored trials (in `states`, None: all), for the readers that need its
    params' distributions or a writable handle: never copied."""
    return study.get_trials(deepcopy=False, states=states)


def trial_count(study: optuna.Study) -> int:
    """How many trials the study holds, in every state."""
    return len(study.get_trials(deepcopy=False))
