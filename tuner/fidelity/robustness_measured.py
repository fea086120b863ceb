"""The robustness check measured on the engine: `tuner run --confirm K` re-measures the best
config and the baseline under the perturbed workloads of `tuner.fidelity.robustness`.

The simulator's check is free but only as good as the simulator; a knife edge that the
simulator does not model (or models where there is none) only a real engine can show. So
after `--confirm`'s re-measurements, the best config and the baseline are each started once
more, and each engine start runs the study's workload and every perturbation of it in turn
(prompts ±3 %, the rate ±10 %; in capacity mode the prompts only, each with its own rate
search). They run as the scenarios of one engine start (`tuner.runners.load_runs.measure_all`),
so the check costs two engine starts, not ten: the start is the expensive part on a real box.

The gains are scored as the simulated check scores them, config against baseline on the same
workload, and judged by the same rule (`robustness.verdict`, labelled "measured"). The record
is stored as `tuner_robustness_measured:<trial>`; `tuner.trial.StudyRecord.robustness_of`
prefers it to the simulator's, so `tuner best` and the report show the measured verdict once
it exists. A study of several scenarios is not re-measured (each scenario times each
perturbation would be its own run); its simulated check stands (docs/robustness.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from tuner import trial as tr
from tuner.fidelity.robustness import (
    NOMINAL,
    Perturbation,
    applicable,
    perturbed,
    verdict,
)
from tuner.measure.measurement import Measurement
from tuner.measure.mixes import objective_of
from tuner.runners.engine_runner import TrialContext, TrialRunner
from tuner.spec.study import ScenarioSpec, StudySpec
from tuner.spec.values import Params
from tuner.trial import RobustnessRecord, ScenarioEntry, TrialPoint
from tuner.workload.datasets import BenchRequest, Workload, resized

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
    spec: StudySpec, requests: Sequence[BenchRequest], tokenizer: HFTokenizer
) -> tuple[StudySpec, dict[str, list[BenchRequest]]]:
    """The study's workload and each perturbation of it as the scenarios of one spec, with
    each one's requests: one engine start measures them all. An engine reads the prompt's
    text, not its stated length, so the prompts themselves are cut or extended."""
    scenarios: list[ScenarioSpec] = []
    reqs: dict[str, list[BenchRequest]] = {}
    for p in (NOMINAL, *applicable(spec)):
        s, _ = perturbed(spec, requests, p)
        name = run_name(p)
        scenarios.append(ScenarioSpec(**s.workload.model_dump(), name=name))
        reqs[name] = [resized(r, tokenizer, p.length_factor) for r in requests]
    return spec.model_copy(update={"scenarios": scenarios}), reqs


def _gain(spec: StudySpec, mine: ScenarioEntry | None, base: ScenarioEntry | None) -> float | None:
    """−score of one run against the baseline's (a capacity ratio, as a log, in capacity mode);
    None where the baseline has no figure, −inf where the config has none."""
    return objective_of(spec).run_gain(
        mine.metrics if mine else None,
        base.metrics if base else None,
        mine.capacity.capacity_rps if mine and mine.capacity else None,
        base.capacity.capacity_rps if base and base.capacity else None,
    )


def measured_gains(
    spec: StudySpec,
    runner: TrialRunner,
    params: Params,
    base_params: Params,
    log_name: str = "robustness",
) -> tuple[dict[str, float | None], dict[str, dict[str, dict[str, float]]], str | None]:
    """(gain per perturbation, the runs' figures, a failure) from one engine start of the
    config and one of the baseline (their logs `<log_name>-config-<ts>.log` and
    `<log_name>-baseline-<ts>.log`)."""
    pspec, reqs = perturbation_runs(spec, runner.requests, runner.tokenizer)
    check = runner.with_spec(pspec, Workload(scenarios={n: tuple(r) for n, r in reqs.items()}))
    measured: dict[str, Measurement] = {}
    for who, p in (
        ("config", params),
        ("baseline", base_params),
    ):  # a failed config: no baseline run
        ctx = TrialContext(
            spec.name, -1, dict(p), phase=lambda _: None, log_name=f"{log_name}-{who}"
        )
        measured[who] = check.measure(ctx)
        if measured[who].metrics is None:
            return {}, {}, f"the {who} failed: {measured[who].failure_reason}"
    names = {run_name(p): p.name for p in (NOMINAL, *applicable(spec))}
    gains: dict[str, float | None] = {}
    runs: dict[str, dict[str, dict[str, float]]] = {}
    for slug, label in names.items():
        base = measured["baseline"].scenarios.get(slug)
        mine = measured["config"].scenarios.get(slug)
        gains[label] = _gain(spec, mine, base)
        runs[label] = {
            "config": dict(mine.metrics) if mine else {},
            "baseline": dict(base.metrics) if base else {},
        }
    return gains, runs, None


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
    best, base = tr.best(points), tr.baseline_of(points)
    if best is None or base is None or best.number == base.number:
        return None
    if objective_of(spec).served_workload(spec.workload) is None:
        return None
    changes = [p.name for p in applicable(spec)]
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
    if failure is not None:
        fragile, words = None, f"not checked on the engine: {failure}"
    else:
        fragile, words = verdict(found, objective_of(spec), source=SOURCE)
    record = RobustnessRecord(
        spec_id=best.spec_id,
        fragile=fragile,
        verdict=words,
        gain=found.get(NOMINAL.name),
        gains={k: v for k, v in found.items() if k != NOMINAL.name},
        runs=runs,
    )
    tr.write_robustness(study, best.number, record)
    return record
