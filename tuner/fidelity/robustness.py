"""Does a config's gain over the baseline survive small changes of the workload?

With fixed-length prompts the optimum can sit on a knife edge: a max-num-batched-tokens
that lines chunks up with the prompt length wins by a margin that one token more or less
in the prompts takes away (issue 13: 1509 against 1510). Real traffic never has exactly the
study's lengths and rate, so before the tuner recommends a config it re-simulates it and
the baseline under perturbed workloads: prompts 3 % shorter and longer, the request rate
10 % lower and higher. The config is **fragile** when, under any of them, it keeps less
than a quarter of its gain (docs/robustness.md). These are the simulator's figures (free, and
labelled SIMULATED); `tuner run --confirm` re-measures them on the engine
(`tuner.fidelity.robustness_measured`), and that verdict wins.
Capacity studies are re-searched under the prompt changes only (the search sets the rate);
scenario mixes perturb every scenario and are scored as the study scores them.

One check over any runner: `compare` runs the config, then the baseline, on the study's
workload and each perturbation and takes each one's gain; `record` judges them. What differs
is how configs run: here one planner per perturbed workload, each config simulated on each;
on the engine every perturbation is a scenario of one engine start per config.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

from tuner import trial as tr
from tuner.errors import UserError
from tuner.fidelity.best_check import CheckInput, check_stored_best, config_run
from tuner.measure.measurement import Measurement
from tuner.measure.mode_words import words_of
from tuner.measure.modes import Objective
from tuner.measure.stored import Stored
from tuner.runners.plan import PlanRunner
from tuner.spec.parts import Measuring
from tuner.spec.study import StudySpec
from tuner.spec.values import Params
from tuner.trial import RobustnessRecord, TrialPoint
from tuner.trial.scoring import score_trial, simulated_reference

if TYPE_CHECKING:
    from tuner.spec.workload import WorkloadSpec
    from tuner.workload.request import BenchRequest

R = TypeVar("R")  # one run of a config, as the check's runner gives it
Gains = dict[str, float | None]  # a config's gain by workload: "nominal", each perturbation's
Runs = dict[str, dict[str, dict[str, float]]]  # by workload: the config's and baseline's figures
# what a study the simulator cannot run raises: no profile for its model or GPU, a bug
CANNOT_SIMULATE = (UserError, KeyError, ValueError, OSError, RuntimeError)


@dataclasses.dataclass(frozen=True)
class Perturbation:
    """One changed workload: prompt lengths and the request rate scaled."""

    name: str
    length_factor: float = 1.0
    rate_factor: float = 1.0


NOMINAL = Perturbation("nominal")
PERTURBATIONS = (
    Perturbation("prompts -3%", length_factor=0.97),
    Perturbation("prompts +3%", length_factor=1.03),
    Perturbation("rate -10%", rate_factor=0.9),
    Perturbation("rate +10%", rate_factor=1.1),
)
# A robust config keeps at least this share of its gain under each change. Calibrated on the
# knife edge of docs/robustness.md: chunk-aligned 1510 keeps 17 %, smooth gains 45-50 %.
KEEP_SHARE = 0.25


def _scaled(requests: Sequence[BenchRequest], factor: float) -> list[BenchRequest]:
    if factor == 1.0:
        return list(requests)
    return [
        dataclasses.replace(r, prompt_len=max(1, round(r.prompt_len * factor))) for r in requests
    ]


def perturbed(
    spec: StudySpec, requests: Sequence[BenchRequest], p: Perturbation
) -> tuple[StudySpec, list[BenchRequest]]:
    """The spec and requests of one perturbed workload (same seed, same arrivals' shape);
    with scenarios, every scenario's rate is scaled alike (their requests: `_runner`)."""
    if p.rate_factor == 1.0:
        return spec, _scaled(requests, p.length_factor)

    def faster(w: WorkloadSpec) -> WorkloadSpec:
        return w.model_copy(update={"request_rate": w.request_rate * p.rate_factor})

    update = {"workload": faster(spec.workload), "scenarios": [faster(s) for s in spec.scenarios]}
    return spec.model_copy(update=update), _scaled(requests, p.length_factor)


def applicable(spec: StudySpec, objective: Objective) -> tuple[Perturbation, ...]:
    """A workload sent all at once (rate inf) has no rate to change; in capacity mode the
    search sets the rate itself, so only the lengths are changed."""
    rates = [w.request_rate for w in (spec.workloads or {"": spec.workload}).values()]
    if objective.rate_can_change(rates):
        return PERTURBATIONS
    return tuple(p for p in PERTURBATIONS if p.rate_factor == 1.0)


def _runner(
    spec: Measuring,
    requests: Sequence[BenchRequest],
    nominal: Mapping[str, list[BenchRequest]],
    p: Perturbation,
) -> PlanRunner:
    """A planner on the perturbed requests: the single workload's, and every scenario's
    (`nominal`: each scenario's own requests)."""
    from tuner.workload.request import Workload

    scenarios = {n: tuple(_scaled(theirs, p.length_factor)) for n, theirs in nominal.items()}
    return PlanRunner(spec, workload=Workload(tuple(requests), scenarios))


def _scenario_requests(spec: Measuring) -> dict[str, list[BenchRequest]]:
    """Each scenario's own requests, by name ({} for a single workload: no planner built)."""
    planner = functools.cache(lambda: PlanRunner(spec))
    return {name: planner().requests_for(name) for name in spec.workloads}


def nominal_runner(spec: Measuring, requests: Sequence[BenchRequest]) -> PlanRunner:
    """A planner on the study's own workload: these requests, and every scenario's."""
    return _runner(spec, requests, _scenario_requests(spec), NOMINAL)


def simulated(runner: PlanRunner, params: Params) -> Measurement | None:
    """The planner's measurement of one config (every scenario, the capacity search as the
    study runs them); None if the engine refuses it."""
    m = config_run(runner, params)
    return m if m.metrics is not None else None


def compare(
    run: Callable[[Params, str], Mapping[str, R | None] | str],
    gain: Callable[[str, R, R], float | None],
    params: Params,
    base_params: Params,
) -> tuple[Gains, dict[str, tuple[R | None, R | None]], str | None]:
    """The check on any runner: `run(config, who)` runs the config, then the baseline, on the
    study's workload and each perturbation (by name; None where refused), or says why it
    failed (then the baseline is not run). (each one's gain: `gain(name, mine, base)`, None
    where the baseline is refused, −inf where the config is; each one's runs; a failure)."""
    mine = run(params, "config")
    if isinstance(mine, str):
        return {}, {}, mine
    base = run(base_params, "baseline")
    if isinstance(base, str):
        return {}, {}, base
    found: Gains = {}
    for n, m in mine.items():
        b = base.get(n)
        found[n] = None if b is None else -math.inf if m is None else gain(n, m, b)
    return found, {n: (m, base.get(n)) for n, m in mine.items()}, None


def gains(
    spec: StudySpec, requests: Sequence[BenchRequest], params: Params, base_params: Params
) -> Gains:
    """The config's gain (−score against the baseline, both simulated on the same workload,
    scored as the study scores: a capacity ratio, a scenario mix) nominal and under each
    perturbation (`compare`), one planner per workload."""
    nominal = _scenario_requests(spec)
    s, reqs = perturbed(spec, requests, NOMINAL)
    runs: dict[str, tuple[StudySpec, PlanRunner]] = {
        NOMINAL.name: (s, _runner(s, reqs, nominal, NOMINAL))
    }
    objective = runs[NOMINAL.name][1].objective  # the study's, built once by its planner
    for p in applicable(spec, objective):
        s, reqs = perturbed(spec, requests, p)
        runs[p.name] = (s, _runner(s, reqs, nominal, p))

    def run(config: Params, who: str) -> dict[str, Measurement | None]:
        return {name: simulated(runner, config) for name, (_, runner) in runs.items()}

    def gain(name: str, mine: Measurement, base: Measurement) -> float:
        s, o = runs[name][0], runs[name][1].objective
        return -score_trial(s, o, mine, simulated_reference(s, o, base, dict(base_params))).score

    return compare(run, gain, params, base_params)[0]


def verdict(
    found: Mapping[str, float | None], mode: Objective, *, source: str = "SIMULATED"
) -> tuple[bool | None, str]:
    """(fragile, in words) from the gains: fragile when a perturbation leaves less than
    KEEP_SHARE of the nominal gain; None when there is no nominal gain to keep. The gains
    are in `mode`'s terms (`Objective.run_gain`: ln(capacity ratios) of a capacity study); a
    nominal gain within its noise (`resolution`: the search's, as a log ratio) is no gain to
    check. `source` labels the figures: the simulator's, or measured on the engine
    (`tuner.fidelity.robustness_measured`)."""
    _figure = words_of(mode).gain_figure
    gain = found.get(NOMINAL.name)
    who, kind = ("the simulator sees", "simulated")
    if source != "SIMULATED":
        who, kind = ("the engine shows", "measured")
    if gain is None or gain <= 0:
        return None, f"not checked: {who} no gain over the baseline on the study's workload"
    if gain <= math.log1p(mode.resolution() or 0.0):  # the search's resolution, as a log
        return None, (
            f"not checked: the {kind} gain ({_figure(gain)}) is within the "
            f"capacity search's resolution"
        )
    lost = {
        name: g
        for name, g in found.items()
        if name != NOMINAL.name and g is not None and g < KEEP_SHARE * gain
    }
    if lost:
        worst = min(lost, key=lambda n: lost[n])
        return True, (
            f"FRAGILE: its gain over the baseline does not survive small workload changes: "
            f"{_figure(gain)} on the study's workload, "
            f"{_figure(lost[worst])} with {worst} "
            f"({source}; {len(lost)} of {len(found) - 1} changes keep less than "
            f"{KEEP_SHARE:.0%} of the gain)"
        )
    kept = min(g for name, g in found.items() if name != NOMINAL.name and g is not None)
    rates_checked = any(p.rate_factor != 1.0 and p.name in found for p in PERTURBATIONS)
    changed = "prompts ±3%" + words_of(mode).fixed_rate()
    if rates_checked:
        changed = "prompts ±3% and rate ±10%"
    return False, (
        f"robust: keeps its gain under {changed} "
        f"({source}: {_figure(gain)}, {_figure(kept)} at worst)"
    )


def record(
    objective: Objective,
    point: TrialPoint,
    found: Gains,
    failure: str | None,
    source: str,
    runs: Runs | None = None,
) -> RobustnessRecord:
    """The record of one check of `point`: its gains judged (`verdict`), or why it was not
    checked."""
    judged = verdict(found, objective, source=source) if failure is None else None
    fragile, words = judged or (None, str(failure))
    gains = {k: v for k, v in found.items() if k != NOMINAL.name}
    return RobustnessRecord(point.spec_id, fragile, words, found.get(NOMINAL.name), gains, runs)


def cannot_simulate(exc: Exception) -> str:
    return f"not checked: the simulator cannot run this study ({exc})"


def check(
    spec: StudySpec,
    objective: Objective,
    requests: Sequence[BenchRequest],
    point: TrialPoint,
    base: TrialPoint,
) -> RobustnessRecord:
    """The record of one check on the simulator (stored by `check_best`)."""
    found: Gains = {}
    failure = None
    try:
        found = gains(spec, requests, point.params, base.params)
    except CANNOT_SIMULATE as exc:
        failure = cannot_simulate(exc)
    return record(objective, point, found, failure, "SIMULATED")


def check_best(
    study: tr.AttrsHolder,
    spec: StudySpec,
    objective: Objective,
    points: Sequence[TrialPoint],
    requests: Sequence[BenchRequest],
) -> RobustnessRecord | None:
    """Check the best config of the current spec against its baseline; store and return the
    record (None when there is no best, or the best is the baseline)."""
    return check_stored_best(
        study,
        points,
        lambda best, base: check(spec, objective, requests, best, base),
        tr.write_robustness,
    )


class Robustness:
    """The check at the end of every run (`tuner.fidelity.best_check.Check`): the best
    config's gain under small workload changes, on the simulator."""

    name = "robustness"
    prefix = tr.ROBUSTNESS
    record: type[Stored] = RobustnessRecord
    on_engine = False
    during = "the robustness check"

    def wanted(self, given: CheckInput) -> bool:
        return True

    def run(self, given: CheckInput) -> RobustnessRecord | None:
        return check_best(
            given.study, given.spec, given.runner.objective, given.points, given.runner.requests
        )
