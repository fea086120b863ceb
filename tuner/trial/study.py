"""What a study stores beside its trials, typed: `StudyRecord`, and its writers.

Study user attrs (names in `tuner.trial.keys`): the specs it has run under (`tuner.trial.specs`
binds them), whether it measured the simulator, the screen's calibration, and the robustness
checks of its best configs. Readers get a `StudyRecord` with `StudyRecord.of(study)`; writers
call the functions below. Duck-typed: `user_attrs`, `set_user_attr`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from tuner.measure.stored import Stored
from tuner.trial import keys as k
from tuner.trial.payloads import CalibrationRecord, RobustnessRecord
from tuner.trial.point import TrialPoint
from tuner.trial.record import AttrsHolder
from tuner.trial.smallest import SmallestChange
from tuner.trial.spec_ids import spec_id

_P = TypeVar("_P", bound=Stored)


@dataclass(frozen=True)
class StudyRecord:
    """A study's user attrs, typed."""

    spec: dict[str, object] | None = None  # the current spec (a StudySpec dump)
    # the current measurement id (`tuner.trial.specs`; None: a study the tuner did not create)
    spec_id: str | None = None
    specs_by_id: dict[str, dict[str, object]] = field(default_factory=dict)
    simulated: bool = False  # SIMULATED_STUDY: every figure is a prediction
    calibration: CalibrationRecord | None = None
    robustness: dict[int, RobustnessRecord] = field(default_factory=dict)
    robustness_measured: dict[int, RobustnessRecord] = field(default_factory=dict)
    smallest: dict[int, SmallestChange] = field(default_factory=dict)
    smallest_measured: dict[int, SmallestChange] = field(default_factory=dict)
    attrs: Mapping[str, object] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(cls, study: AttrsHolder) -> StudyRecord:
        """Read a study's attrs (one storage read)."""
        return cls.decode(study.user_attrs)

    @classmethod
    def decode(cls, attrs: Mapping[str, object]) -> StudyRecord:
        by_id: dict[str, dict[str, object]] = {}
        for key, value in attrs.items():
            if key.startswith(k.SPEC_BY_ID) and isinstance(value, Mapping):
                by_id[key.removeprefix(k.SPEC_BY_ID)] = dict(value)
        spec = attrs.get(k.SPEC)
        return cls(
            spec=dict(spec) if isinstance(spec, Mapping) else None,
            spec_id=sid if isinstance(sid := attrs.get(k.SPEC_ID), str) else None,
            specs_by_id=by_id,
            simulated=bool(attrs.get(k.SIMULATED_STUDY)),
            calibration=CalibrationRecord.decode(attrs.get(k.CALIBRATION)),
            robustness=_per_trial(attrs, k.ROBUSTNESS, RobustnessRecord),
            robustness_measured=_per_trial(attrs, k.ROBUSTNESS_MEASURED, RobustnessRecord),
            smallest=_per_trial(attrs, k.SMALLEST, SmallestChange),
            smallest_measured=_per_trial(attrs, k.SMALLEST_MEASURED, SmallestChange),
            attrs=dict(attrs),
        )

    def checked(self, prefix: str, payload: type[_P]) -> dict[int, _P]:
        """The records a check of the best config (`tuner.fidelity.best_check.Check`) stored
        under `<prefix><trial number>` that read as `payload`, by trial number."""
        return _per_trial(self.attrs, prefix, payload)

    def robustness_of(self, point: TrialPoint) -> RobustnessRecord | None:
        """The stored robustness check of this trial's config under the spec it ran under: the
        one measured on the engine (`--confirm`) if any, else the simulator's."""
        for found in (self.robustness_measured, self.robustness):
            rec = found.get(point.number)
            if rec is not None and rec.spec_id == point.spec_id:
                return rec
        return None

    def smallest_of(self, point: TrialPoint) -> SmallestChange | None:
        """Which of this trial's changed flags carry its gain, checked under the spec it ran
        under: measured on the engine (`--confirm`) if it was, else on the simulator
        (`tuner.fidelity.smallest_check`); None when not checked."""
        for found in (self.smallest_measured.get(point.number), self.smallest.get(point.number)):
            if found is not None and found.checked and found.spec_id == point.spec_id:
                return found
        found = self.smallest.get(point.number)
        return found if found is not None and found.spec_id == point.spec_id else None

    def simulated_with(self, points: Sequence[TrialPoint]) -> bool:
        """The study measured the simulator (its attr, or any trial's figures)."""
        return self.simulated or any(p.simulated for p in points)


def _per_trial(attrs: Mapping[str, object], prefix: str, payload: type[_P]) -> dict[int, _P]:
    """The payloads stored under `<prefix><trial number>` that read, by trial number."""
    out: dict[int, _P] = {}
    for key, value in attrs.items():
        number = key.removeprefix(prefix)
        found = payload.decode(value) if key.startswith(prefix) else None
        if found is not None and number.isdecimal():
            out[int(number)] = found
    return out


def create(study: AttrsHolder, spec_dump: Mapping[str, object], simulated: bool) -> None:
    """A new study's attrs: the spec it was created with, and whether it measures the
    simulator. Python-mode dump: an infinite request rate survives (Optuna writes it as
    JSON's Infinity), where pydantic's JSON mode would turn it into null. The spec's id is
    stored with it, so every study the tuner made has both."""
    study.set_user_attr(k.SPEC, dict(spec_dump))
    study.set_user_attr(k.SPEC_ID, spec_id(spec_dump))
    study.set_user_attr(k.SIMULATED_STUDY, simulated)


def mark_simulated(study: AttrsHolder) -> None:
    """A study that measured the simulated engine is labelled simulated (once)."""
    if not study.user_attrs.get(k.SIMULATED_STUDY):
        study.set_user_attr(k.SIMULATED_STUDY, True)


def write_calibration(study: AttrsHolder, record: CalibrationRecord) -> None:
    study.set_user_attr(k.CALIBRATION, record.encode())


def write_checked(study: AttrsHolder, prefix: str, trial: int, record: Stored) -> None:
    """Store a check's record of trial `trial`'s config under `<prefix><trial number>`."""
    study.set_user_attr(f"{prefix}{trial}", record.encode())


def write_robustness(study: AttrsHolder, trial: int, record: RobustnessRecord) -> None:
    """Store a robustness check of trial `trial`'s config (measured ones apart)."""
    write_checked(study, k.ROBUSTNESS_MEASURED if record.measured else k.ROBUSTNESS, trial, record)


def write_smallest(study: AttrsHolder, trial: int, record: SmallestChange) -> None:
    """Store which of trial `trial`'s changed flags carry its gain (measured ones apart)."""
    write_checked(study, k.SMALLEST_MEASURED if record.measured else k.SMALLEST, trial, record)
