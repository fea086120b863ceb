"""The smallest change that keeps the best config's gain, on the calibrated simulator.

At the end of `tuner run` (and `tuner plan`), after the robustness check, the best config of the
current spec and each config with one of its changed flags reverted to vLLM's default are
simulated on the study's workload (`robustness.nominal_runner`: every scenario, the capacity
search as the study runs them) and scored against the simulated baseline, as the study scores;
`tuner.fidelity.smallest` decides which flags carry the gain; the record is stored as
`tuner_smallest:<trial>`. Every figure is the simulator's (SIMULATED). The simulator is the
study's calibrated one: the profile the multi-fidelity screen last fitted to this study's real
trials (`search.fidelity: multi`), else the study's own profile, said so in the record's note.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pydantic import ValidationError

from tuner import trial as tr
from tuner.errors import UserError
from tuner.fidelity.best_check import check_stored_best
from tuner.fidelity.robustness import CANNOT_SIMULATE, cannot_simulate, nominal_runner, simulated
from tuner.fidelity.smallest import smallest_change
from tuner.measure.measurement import Measurement
from tuner.sim.profile_file import ProfileFile
from tuner.spec.study import StudySpec
from tuner.spec.values import Params
from tuner.trial import SmallestChange, StudyRecord, TrialPoint, TrialRecord
from tuner.trial.clearly import ClearlyBetter
from tuner.trial.scoring import judge, score_trial, simulated_reference
from tuner.trial.smallest import SIMULATED

if TYPE_CHECKING:
    from tuner.sim.profiles import GpuProfile
    from tuner.workload.datasets import BenchRequest


@dataclass(frozen=True)
class ScoredConfig:
    """One config as the simulator (or the engine) scored it, and the SLOs it breaks."""

    point: TrialPoint
    broken: tuple[str, ...]


Score = Callable[[Params], ScoredConfig | None]


def _calibrated(study: StudyRecord) -> tuple[GpuProfile | None, str]:
    """The study's calibrated profile (None: none stored, or stored by an older tuner) and the
    profile in words, for the record's note."""
    cal = study.calibration
    if cal is not None and cal.observations > 0:
        try:
            profile = ProfileFile.model_validate(cal.profile).to_profile()
        except ValidationError:  # stored by an older tuner: fall back to the study's own
            pass
        else:
            return profile, f"the simulator calibrated on {cal.observations} of this study's trials"
    return None, "the simulator with the study's own profile (no calibration stored)"


def loses(spec: StudySpec) -> Callable[[ScoredConfig, ScoredConfig], tuple[bool, str]]:
    """The rule: the other config loses the config's gain when it breaks an SLO the config
    meets, or scores worse and the config is clearly better than it (`ClearlyBetter`)."""
    clear = ClearlyBetter(spec)

    def rule(full: ScoredConfig, other: ScoredConfig) -> tuple[bool, str]:
        broken = [b for b in other.broken if b not in full.broken]
        if broken:
            return True, f"it breaks {', '.join(broken)}"
        worse = (other.point.score or 0.0) > (full.point.score or 0.0)
        if worse and clear(full.point, other.point):
            return True, f"clearly worse on {', '.join(clear.on(full.point, other.point))}"
        return False, f"within noise: {clear.why}" if worse else "no worse"

    return rule


def scorer(
    spec: StudySpec, measure: Callable[[Params], Measurement | None], ref: TrialPoint
) -> Score:
    """Each config measured by `measure` (None: refused) and scored against `ref`, as the
    study scores a trial."""

    def score(params: Params) -> ScoredConfig | None:
        m = measure(params)
        if m is None:
            return None
        scored = score_trial(spec, m, ref)
        record = TrialRecord(metrics=dict(m.metrics or {}), cis=dict(m.ci), **scored.fields())
        slos = judge(spec, dict(m.metrics or {}), m.capacity, dict(m.scenarios), ref).slos
        broken = tuple(name for name, v in slos.items() if v > 0)
        return ScoredConfig(TrialPoint.measured_as(-1, params, record), broken)

    return score


def decide(
    spec: StudySpec,
    point: TrialPoint,
    defaults: Params,
    score: Score,
    note: str,
    source: str,
    only: Sequence[str] | None = None,
) -> SmallestChange:
    """`tuner.fidelity.smallest`'s answer for `point` (`only`: these flags tried), as a record
    of its spec and trial."""
    rule = loses(spec)
    found = smallest_change(point.params, defaults, score, rule, lambda s: s.point.score, only)
    if found is None:
        found = SmallestChange(None, False, f"not checked: the config was refused ({source})")
    else:
        found = replace(found, note=note, source=source)
    return replace(found, spec_id=point.spec_id, trial=point.number)


def check(
    spec: StudySpec,
    study: StudyRecord,
    requests: Sequence[BenchRequest],
    point: TrialPoint,
    base: TrialPoint,
) -> SmallestChange:
    """The record of one check on the simulator (stored by `check_best`)."""
    try:
        runner = nominal_runner(spec, requests)
        calibrated, profile = _calibrated(study)
        if calibrated is not None:  # the study's calibrated profile, when one is stored
            runner.gpu = calibrated
        base_m = simulated(runner, base.params)
        if base_m is None:
            raise UserError("the simulator refuses vLLM's defaults")
        ref = simulated_reference(spec, base_m, dict(base.params))
        score = scorer(spec, lambda params: simulated(runner, params), ref)
        return decide(spec, point, base.params, score, profile, SIMULATED)
    except CANNOT_SIMULATE as exc:
        return SmallestChange(point.spec_id, False, cannot_simulate(exc), trial=point.number)


def check_best(
    study: tr.AttrsHolder,
    spec: StudySpec,
    points: Sequence[TrialPoint],
    requests: Sequence[BenchRequest],
    say: Callable[[str], None] = lambda _: None,
) -> SmallestChange | None:
    """Check the best config of the current spec against its baseline; store and return the
    record (None when there is no best, or the best is the baseline). Not checked again when
    its stored record is current (`unchanged`): the run that ends found no new best."""
    stored = StudyRecord.of(study)

    def run(best: TrialPoint, base: TrialPoint) -> SmallestChange:
        say("checking which of the best config's changed flags carry its gain (SIMULATED)")
        return check(spec, stored, requests, best, base)

    def current(best: TrialPoint) -> SmallestChange | None:
        found = unchanged(stored, best)
        if found is not None:
            say(f"which of trial {best.number}'s changed flags carry its gain: checked already")
        return found

    return check_stored_best(study, points, run, tr.write_smallest, current)


def unchanged(study: StudyRecord, best: TrialPoint) -> SmallestChange | None:
    """The simulator's stored check of `best`, when nothing it depends on changed since: the
    same trial under the same spec, on the same simulator (its profile's words, which count
    the trials the calibration was fitted on, are the record's note). Else None."""
    found = study.smallest.get(best.number)
    if found is None or not found.checked or found.trial != best.number:
        return None
    if found.spec_id != best.spec_id or found.note != _calibrated(study)[1]:
        return None
    return found
