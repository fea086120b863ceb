"""The smallest change that keeps the best config's gain, on the calibrated simulator.

At the end of `tuner run` (and `tuner plan`), after the robustness check, the best config of the
current spec and each config with one of its changed flags reverted to vLLM's default are
simulated on the study's workload (`robustness.nominal_runner`: every scenario, the capacity
search as the study runs them) and scored against the simulated baseline, as the study scores;
`tuner.fidelity.smallest` decides which flags carry the gain; the record is stored as
`tuner_smallest:<trial>`. Every figure is the simulator's (SIMULATED). The simulator is the
study's calibrated one: the profile the multi-fidelity screen last fitted to this study's real
trials (`search.fidelity: multi`), else the study's own profile, said so in the record's note.
The check is one over any runner (`on_runner`): here the calibrated planner, on the engine
`tuner.fidelity.smallest_measured`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pydantic import ValidationError

from tuner import trial as tr
from tuner.errors import UserError
from tuner.fidelity.best_check import CheckInput, check_stored_best, config_run
from tuner.fidelity.robustness import CANNOT_SIMULATE, cannot_simulate, nominal_runner
from tuner.fidelity.smallest import smallest_change
from tuner.measure.measurement import Measurement
from tuner.measure.modes import Objective
from tuner.measure.stored import Stored
from tuner.runners.trial_runner import TrialRunner
from tuner.sim.flags import models
from tuner.sim.profile_file import ProfileFile
from tuner.spec.flag_values import long_flag
from tuner.spec.parts import Measuring
from tuner.spec.sections import SearchSpace
from tuner.spec.values import Params
from tuner.trial import SmallestChange, StudyRecord, TrialPoint, TrialRecord
from tuner.trial.clearly import ClearlyBetter
from tuner.trial.scoring import judge, score_trial, simulated_reference
from tuner.trial.smallest import SIMULATED

if TYPE_CHECKING:
    from tuner.sim.profiles import GpuProfile
    from tuner.workload.request import BenchRequest


@dataclass(frozen=True)
class ScoredConfig:
    """One config as the simulator (or the engine) scored it, and the SLOs it breaks."""

    point: TrialPoint
    broken: tuple[str, ...]


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


def loses(objective: Objective) -> Callable[[ScoredConfig, ScoredConfig], tuple[bool, str]]:
    """The rule: the other config loses the config's gain when it breaks an SLO the config
    meets, or scores worse and the config is clearly better than it (`ClearlyBetter`)."""
    clear = ClearlyBetter(objective)

    def rule(full: ScoredConfig, other: ScoredConfig) -> tuple[bool, str]:
        broken = [b for b in other.broken if b not in full.broken]
        if broken:
            return True, f"it breaks {', '.join(broken)}"
        worse = (other.point.score or 0.0) > (full.point.score or 0.0)
        if worse and clear(full.point, other.point):
            return True, f"clearly worse on {', '.join(clear.on(full.point, other.point))}"
        if not worse:
            return False, "no worse"
        return False, f"within noise: {clear.why_of(full.point, other.point)}"

    return rule


def on_runner(
    spec: Measuring,
    runner: TrialRunner,
    point: TrialPoint,
    base: TrialPoint,
    note: str,
    source: str,
    *,
    ref: TrialPoint | None = None,
    only: Sequence[str] | None = None,
    known: TrialPoint | None = None,
    points: Sequence[TrialPoint] | None = None,
) -> tuple[SmallestChange, bool]:
    """The check on any runner (the calibrated planner, the study's engine): `point`'s config
    and each with changed flags reverted to `base`'s values (`only`: these flags tried) run
    once each on `runner` (`known`: a run of `point`'s config that stands for it), scored as
    the study scores against `ref` (None: `base`'s config run on this runner too; engine logs
    `smallest-<trial>-<ts>.log`), decided by `tuner.fidelity.smallest` with the rule `loses`,
    as a record of `point`'s spec and trial. `points`: the study's trials, when `runner` is
    the simulator: a flag it does not model is judged on them (`own_trial`), never on it.
    (the record, whether a run was simulated)."""
    seen: dict[tr.ParamsKey, Measurement | None] = {}
    simulated = [known.simulated] if known is not None else []  # `tuner sim serve`, the planner

    def measure(params: Params) -> Measurement | None:
        key = tr.params_key(params)
        if key not in seen:
            m = config_run(runner, params, f"smallest-{point.number:04d}")
            seen[key] = m if m.metrics is not None else None
            simulated.append(m.simulated)
        return seen[key]

    if ref is None:
        base_m = measure(base.params)
        if base_m is None:
            raise UserError("the simulator refuses vLLM's defaults")
        ref = simulated_reference(spec, runner.objective, base_m, dict(base.params))

    def score(params: Params) -> ScoredConfig | None:
        if known is not None and tr.params_key(params) == tr.params_key(point.params):
            return ScoredConfig(known, tuple(known.broken_constraints))
        m = measure(params)
        if m is None:
            return None
        scored = score_trial(spec, runner.objective, m, ref)
        record = TrialRecord(metrics=dict(m.metrics or {}), cis=dict(m.ci), **scored.fields())
        found = dict(m.metrics or {})
        slos = judge(spec, runner.objective, found, m.capacity, dict(m.scenarios), ref).slos
        broken = tuple(name for name, v in slos.items() if v > 0)
        return ScoredConfig(TrialPoint.measured_as(-1, params, record), broken)

    def measured(params: Params) -> ScoredConfig | None:
        own = own_trial(points or (), point, params)
        return None if own is None else ScoredConfig(own, tuple(own.broken_constraints))

    rule, score_of = loses(runner.objective), lambda s: s.point.score
    blind = unmodelled_params(spec.search_space) if points is not None else ()
    found = smallest_change(point.params, base.params, score, rule, score_of, only, blind, measured)
    if found is None:
        found = SmallestChange(None, False, f"not checked: the config was refused ({source})")
    else:
        found = replace(found, note=note, source=source)
    return replace(found, spec_id=point.spec_id, trial=point.number), any(simulated)


def unmodelled_params(search_space: SearchSpace) -> set[str]:
    """The search space's parameters the simulator's figures do not depend on: flags it does
    not model (`tuner.sim.flags.models`) and environment variables."""
    space = search_space.parameters
    return {name for name, p in space.items() if not models(long_flag(name, p))}


def own_trial(points: Sequence[TrialPoint], point: TrialPoint, params: Params) -> TrialPoint | None:
    """The study's own measurement of config `params` under `point`'s spec: `point` itself for
    its own config, else the latest trial of that config measured whole by a real engine
    (never the simulator's figures: it does not see the flag in question). None: none."""
    key = tr.params_key(params)
    found = [
        p
        for p in (point, *points)
        if tr.params_key(p.params) == key
        and p.spec_id == point.spec_id
        and p.engine_measured
        and not p.simulated
    ]
    return max(found, key=lambda p: (p.number == point.number, p.number)) if found else None


def check(
    spec: Measuring,
    study: StudyRecord,
    requests: Sequence[BenchRequest],
    point: TrialPoint,
    base: TrialPoint,
    points: Sequence[TrialPoint] = (),
) -> SmallestChange:
    """The record of one check on the calibrated simulator (stored by `check_best`); a flag
    it does not model judged on the study's trials (`points`)."""
    try:
        runner = nominal_runner(spec, requests)
        calibrated, profile = _calibrated(study)
        if calibrated is not None:  # the study's calibrated profile, when one is stored
            runner.gpu = calibrated
        return on_runner(spec, runner, point, base, profile, SIMULATED, points=points)[0]
    except CANNOT_SIMULATE as exc:
        return SmallestChange(point.spec_id, False, cannot_simulate(exc), trial=point.number)


def check_best(
    study: tr.AttrsHolder,
    spec: Measuring,
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
        return check(spec, stored, requests, best, base, points)

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


class Smallest:
    """The check at the end of every run (`tuner.fidelity.best_check.Check`): which of the
    best config's changed flags carry its gain, on the calibrated simulator."""

    name = "smallest"
    prefix = tr.SMALLEST
    record: type[Stored] = SmallestChange
    on_engine = False
    during = "the check of which flags carry the gain"

    def wanted(self, given: CheckInput) -> bool:
        return True

    def run(self, given: CheckInput) -> SmallestChange | None:
        return check_best(
            given.study, given.spec, given.points, given.runner.requests, say=given.say
        )
