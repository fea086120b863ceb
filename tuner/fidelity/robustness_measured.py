"""The robustness check measured on the engine: `tuner run --confirm K` re-measures the best
config and the baseline under the perturbed workloads of `tuner.fidelity.robustness`.

The simulator's check is free but only as good as the simulator; a knife edge that the
simulator does not model (or models where there is none) only a real engine can show. So
after `--confirm`'s re-measurements, the best config and the baseline are each started once
more, and each engine start runs the study's workload and every perturbation of it in turn
(prompts ±3 %, the rate ±10 %; in capacity mode the prompts only, each with its own rate
search). They run as the scenarios of one engine start (`tuner.runners.load_runs.measure_all`),
so the check costs two engine starts, not ten: the start is the expensive part on a real box.

It is the one check (`robustness.compare`, judged and recorded by `robustness.record`,
labelled "measured on the engine") with these runs: each gain is one run's, config against
baseline on the same workload (`Objective.run_gain`: −score, or ln of the capacity ratio).
The record is stored as `tuner_robustness_measured:<trial>`; `StudyRecord.robustness_of`
prefers it to the simulator's, so `tuner best` and the report show the measured verdict once
it exists. A study of several scenarios is not re-measured (each scenario times each
perturbation would be its own run); its simulated check stands (docs/robustness.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from tuner import trial as tr
from tuner.fidelity import robustness
from tuner.fidelity.best_check import CheckInput, best_pair, config_run
from tuner.fidelity.robustness import NOMINAL, Perturbation, applicable, perturbed
from tuner.measure.modes import Objective, RunFigures
from tuner.measure.stored import Stored
from tuner.runners.trial_runner import TrialRunner
from tuner.spec.sections import ScenarioSpec
from tuner.spec.study import StudySpec
from tuner.spec.values import Params
from tuner.trial import RobustnessRecord, ScenarioEntry, TrialPoint
from tuner.workload.datasets import resized
from tuner.workload.request import BenchRequest, Workload

if TYPE_CHECKING:
    from tuner.workload.tokenizer import HFTokenizer

SOURCE = "measured on the engine"
REDO = "a later `tuner run` of this study redoes it"
NOT_FINISHED = f"not checked on the engine: the check started and did not finish; {REDO}"


def run_name(p: Perturbation) -> str:
    """A perturbation as a scenario name (letters, digits, _ and - only)."""
    return (p.name.replace(" +", "_plus_").replace(" -", "_minus_").replace("%", "pct")).replace(
        " ", "_"
    )


def perturbation_runs(
    spec: StudySpec,
    objective: Objective,
    requests: Sequence[BenchRequest],
    tokenizer: HFTokenizer,
) -> tuple[StudySpec, dict[str, list[BenchRequest]]]:
    """The study's workload and each perturbation of it as the scenarios of one spec, with
    each one's requests: one engine start measures them all. An engine reads the prompt's
    text, not its stated length, so the prompts themselves are cut or extended."""
    scenarios: list[ScenarioSpec] = []
    reqs: dict[str, list[BenchRequest]] = {}
    for p in (NOMINAL, *applicable(spec, objective)):
        s, _ = perturbed(spec, requests, p)
        name = run_name(p)
        scenarios.append(ScenarioSpec(**s.workload.model_dump(), name=name))
        reqs[name] = [resized(r, tokenizer, p.length_factor) for r in requests]
    return spec.model_copy(update={"scenarios": scenarios}), reqs


def _figures(run: ScenarioEntry) -> RunFigures:
    return RunFigures(run.metrics, run.capacity.capacity_rps if run.capacity else 0.0)


def measured_gains(
    spec: StudySpec,
    runner: TrialRunner,
    params: Params,
    base_params: Params,
    log_name: str = "robustness",
) -> tuple[robustness.Gains, robustness.Runs, str | None]:
    """(gain per perturbation, the runs' figures, a failure) from one engine start of the
    config and one of the baseline (their logs `<log_name>-config-<ts>.log` and
    `<log_name>-baseline-<ts>.log`), each gain the mode's (`Objective.run_gain`)."""
    objective = runner.objective  # the study's
    pspec, reqs = perturbation_runs(spec, objective, runner.requests, runner.tokenizer)
    check = runner.with_spec(pspec, Workload(scenarios={n: tuple(r) for n, r in reqs.items()}))
    slugs = {p.name: run_name(p) for p in (NOMINAL, *applicable(spec, objective))}

    def run(config: Params, who: str) -> dict[str, ScenarioEntry | None] | str:
        m = config_run(check, config, f"{log_name}-{who}")
        if m.metrics is None:
            return f"the {who} failed: {m.failure_reason}"
        return {name: m.scenarios.get(slug) for name, slug in slugs.items()}

    def gain(_: str, mine: ScenarioEntry, base: ScenarioEntry) -> float | None:
        return objective.run_gain(_figures(mine), _figures(base))

    found, pairs, failure = robustness.compare(run, gain, params, base_params)
    runs = {
        name: {"config": dict(m.metrics) if m else {}, "baseline": dict(b.metrics) if b else {}}
        for name, (m, b) in pairs.items()
    }
    return found, runs, failure


def check_best_measured(
    study: tr.AttrsHolder,
    spec: StudySpec,
    points: Sequence[TrialPoint],
    runner: TrialRunner,
    say: Callable[[str], None] = lambda _: None,
) -> RobustnessRecord | None:
    """Measure the check for the best config of the current spec; store and return the record
    (None when there is no best, the best is the baseline, or the study has no one workload
    a deployment serves to perturb: a scenario mix, `Objective.served_workload`)."""
    pair = best_pair(points)
    if pair is None or runner.objective.served_workload(spec.workload) is None:
        return None
    best, base = pair
    changes = [p.name for p in applicable(spec, runner.objective)]
    say(
        f"re-measuring trial {best.number} and the baseline on the engine under "
        f"{', '.join(changes)} (2 engine starts, {len(changes) + 1} runs each)"
    )
    unfinished = RobustnessRecord(best.spec_id, None, NOT_FINISHED, runs={}, finished=False)
    tr.write_robustness(study, best.number, unfinished)  # what a killed tuner leaves
    try:
        found, runs, failure = measured_gains(
            spec, runner, best.params, base.params, f"robustness-{best.number:04d}"
        )
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP (`tuner.run.signals`)
        name = getattr(exc, "signal_name", "SIGINT")
        words = f"not checked on the engine: the check was interrupted by {name}; {REDO}"
        tr.write_robustness(study, best.number, replace(unfinished, verdict=words))
        raise
    failure = f"not checked on the engine: {failure}" if failure is not None else None
    record = robustness.record(runner.objective, best, found, failure, SOURCE, runs)
    tr.write_robustness(study, best.number, record)
    return record


class MeasuredRobustness:
    """The robustness check measured on the engine (`tuner.fidelity.best_check.Check`): after
    a `--confirm` on a real engine (it then wins in `best`), or again when an earlier run's
    measured check of this config did not finish."""

    name = "robustness_measured"
    prefix = tr.ROBUSTNESS_MEASURED
    record: type[Stored] = RobustnessRecord
    on_engine = True
    during = "the measured robustness check"

    def wanted(self, given: CheckInput) -> bool:
        return not given.runner.planned and (bool(given.confirm) or _unfinished(given))

    def run(self, given: CheckInput) -> RobustnessRecord | None:
        return check_best_measured(
            given.study, given.spec, given.points, given.runner, say=given.say
        )


def _unfinished(given: CheckInput) -> bool:
    """The best config's measured check started and did not finish (interrupted, killed)."""
    best = tr.best(given.points)
    if best is None:
        return False
    stored = tr.StudyRecord.of(given.study).checked(MeasuredRobustness.prefix, RobustnessRecord)
    found = stored.get(best.number)
    return found is not None and not found.finished and found.spec_id == best.spec_id
