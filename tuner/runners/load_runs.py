"""Several workload runs on one engine start: capacity mode's rate steps, and scenario mixes.

A runner starts the engine (or its simulation) once and hands over `run(scenario, workload)`,
which runs one workload against it and returns its `Measurement`. The objective object decides
what to run (`measure_all`): the single workload once; in capacity mode a rate search
(`tuner.measure.capacity`) per workload; a scenario mix, each scenario in turn. Every run shares
the one engine start, the expensive part (docs/objective.md: "Capacity mode", "Scenario mixes").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from tuner.errors import TunerError
from tuner.measure import capacity
from tuner.measure.capacity import Beat
from tuner.measure.measurement import Measurement
from tuner.measure.modes import Objective
from tuner.measure.runs import CapacityResult, PrefixCacheRun, RateStep, ScenarioEntry
from tuner.measure.stored import is_finite
from tuner.spec.metric_keys import PREFIX_CACHE_HIT_RATE, GoodputMetric, goodput_metric
from tuner.spec.parts import Judging, Measuring
from tuner.spec.sections import ObjectiveSpec
from tuner.spec.slo import SloLimit
from tuner.spec.workload import SEED_LIMIT, WorkloadSpec
from tuner.trial.ranking import best, reference
from tuner.workload.client import CHAT_ENDPOINT
from tuner.workload.cold import workload_hit_rate

if TYPE_CHECKING:
    from tuner.trial.point import TrialPoint
    from tuner.workload.benchmark import BenchmarkResult
    from tuner.workload.request import BenchRequest
    from tuner.workload.tokenizer import HFTokenizer


class RunFn(Protocol):
    """One run of workload `w` (scenario `name`; "" names the single workload). `whole`: never
    stopped early (a capacity interval's run: its figures' size is the evidence)."""

    def __call__(self, name: str, w: WorkloadSpec, /, *, whole: bool = False) -> Measurement: ...


class CacheRunner(Protocol):
    """A runner as `cache_run` reads it (`EngineRunner`): its requests and their tokenizer, and
    its memo of the hit rate each scenario's requests imply."""

    spec: Measuring
    objective: Objective
    implied: dict[str, tuple[list[BenchRequest], float]]

    @property
    def tokenizer(self) -> HFTokenizer: ...

    def requests_for(self, scenario: str, w: WorkloadSpec | None = None) -> list[BenchRequest]: ...


class _StepFailed(TunerError):
    def __init__(self, m: Measurement) -> None:
        self.m = m


def cache_run(
    runner: CacheRunner, name: str, w: WorkloadSpec, result: BenchmarkResult
) -> PrefixCacheRun:
    """One run's prefix cache: the hit rate measured (`result`) against what the prompts of
    scenario `name` imply, computed once per request list (`runner.implied`, by scenario)."""
    requests = runner.requests_for(name, w)
    known = runner.implied.get(name)
    if known is None or known[0] is not requests:
        chat = w.endpoint == CHAT_ENDPOINT
        known = (requests, workload_hit_rate(requests, runner.tokenizer, chat))
        runner.implied[name] = known
    return PrefixCacheRun(
        hit_rate=result.metrics.get(PREFIX_CACHE_HIT_RATE),
        implied_rate=known[1],
        scenario=name or None,
        rate_rps=runner.objective.stated_rate(w.request_rate),
        reset=result.cache_reset,
    )


def step_record(scenario: str, step: capacity.Step) -> RateStep:
    """One rate step as the trial stores it: the curve's point, all figures."""
    figures = {k: float(v) for k, v in step.metrics.items() if is_finite(v)}
    return RateStep(
        step.rate_rps,
        step.feasible,
        scenario or None,
        step.pruned_reason,
        figures,
        verdict=step.verdict or None,
        runs=step.runs,
        ci={k: (float(lo), float(hi)) for k, (lo, hi) in step.ci.items()},
        run_verdicts=step.run_verdicts,
        run_excess=step.run_excess,
    )


def goodput_limits(slos: list[SloLimit]) -> dict[GoodputMetric, float]:
    """Per-request limits for `request_goodput` from the SLOs on TTFT, TPOT and E2EL (the
    tightest of each), when the workload sets none: the good requests at the capacity rate."""
    out: dict[GoodputMetric, float] = {}
    for limit in slos:
        name = limit.metric.rsplit("_", 2)[-2] if limit.metric.endswith("_ms") else ""
        kind = goodput_metric(name)
        if limit.upper and kind is not None:
            out[kind] = min(out.get(kind, math.inf), limit.value)
    return out


def start_rate(objective: ObjectiveSpec, w: WorkloadSpec) -> float:
    """The search's first rate: the study's, else the workload's finite rate, else 1 req/s."""
    c = objective.search
    if c.start_rps is not None:
        return c.start_rps
    return w.request_rate if math.isfinite(w.request_rate) else 1.0


class _RateRuns:
    """`measure(rate, repeat)` of the capacity search on one workload: the run at that rate on
    the workload's seed + `repeat` (a repeat: fresh prompts and arrivals), judged by its own
    95 % intervals (`capacity.step_verdict`) and by its excess over the SLOs
    (`capacity.run_excess`, the evidence the search judges the rate by), pooled with the
    rate's runs before it."""

    def __init__(
        self, name: str, w: WorkloadSpec, run: RunFn, slos: list[SloLimit], failed_max: float
    ) -> None:
        self.name, self.w, self.run, self.slos, self.failed_max = name, w, run, slos, failed_max
        self.runs: list[Measurement] = []  # every run, in order
        self.pooled: dict[float, list[Measurement]] = {}  # each rate's runs, and their pool last
        self.verdicts: dict[float, list[str]] = {}  # each run's own, by rate
        self.excess: dict[float, list[tuple[float, bool]]] = {}  # each run's, by rate

    def __call__(self, rate: float, repeat: int, whole: bool = False) -> capacity.Step:
        w, slos, slo_metrics = self.w, self.slos, [limit.metric for limit in self.slos]
        seed = (w.seed + repeat) % SEED_LIMIT
        at = w.model_copy(update={"request_rate": rate, "seed": seed})
        m = self.run(self.name, at, whole=whole) if whole else self.run(self.name, at)
        self.runs.append(m)
        if m.metrics is None:
            raise _StepFailed(m)
        done = [*self.pooled.get(rate, [])[:-1], m] if repeat else [m]
        own = pooled_runs([m], w, slo_metrics)  # this run alone, its SLO figures' intervals
        assert own.metrics is not None  # `m` has its figures
        failed_max, pruned = self.failed_max, bool(m.pruned_reason)
        judged = capacity.step_verdict(
            own.metrics, own.ci, slos, failed_fraction_max=failed_max, pruned=pruned
        )
        said = self.verdicts[rate] = [*self.verdicts.get(rate, [])[:repeat], judged]
        proved = capacity.stopped_excess(m.pruned_decision.censored if m.pruned_decision else {})
        excess = capacity.run_excess(
            own.metrics, slos, failed_fraction_max=failed_max, pruned=pruned, at_least=proved
        )
        runs = self.excess[rate] = [*self.excess.get(rate, [])[:repeat], excess]
        p = own if len(done) == 1 else pooled_runs(done, w, slo_metrics)
        self.pooled[rate] = [*done, p]
        assert p.metrics is not None  # every run of `done` has its figures
        stopped = next((r.pruned_reason for r in reversed(done) if r.pruned_reason), None)
        ok = not stopped and capacity.meets(p.metrics, slos, failed_fraction_max=self.failed_max)
        slo_ci = {lim.metric: p.ci[lim.metric] for lim in slos if lim.metric in p.ci}
        return capacity.Step(
            rate,
            dict(p.metrics),
            ok,
            stopped,
            capacity.UNSURE,  # until the search judges it with the other rates (`judged`)
            len(done),
            slo_ci,
            tuple(said),
            tuple(e for e, _ in runs),
            tuple(whole for _, whole in runs),
        )


def search_capacity(
    spec: Judging,
    name: str,
    w: WorkloadSpec,
    run: RunFn,
    beat: Beat | None = None,
    bracket: tuple[float, float] | None = None,
) -> Measurement:
    """The rate search on one workload. The result is the run at the capacity rate (when no
    rate met the SLOs, the lowest-rate run) with every step attached; a step whose engine
    failed ends the trial as that failure. `beat`: early stopping's race against the
    incumbent (`capacity_to_beat`, `capacity.race_rps`); a config that breaks an SLO at the
    race's rate is stopped there, a finished trial whose capacity is below that rate
    (capacity 0: no rate it ran met the SLOs; its interval (0, the race's rate)).
    The rates searched end at `capacity.max_rps` or at the highest rate the workload's
    prompts can show (`capacity.shown_rps`), whichever is lower. `bracket`: the first two
    rates, from the config's predicted capacity (`capacity.predicted_bracket`); a scenario
    mix's searches start from their own rates (the prediction is the mix's mean capacity)."""
    c, slos = spec.objective.search, spec.slo_limits(name or None)
    if w.goodput is None:
        w = w.model_copy(update={"goodput": goodput_limits(slos) or None})
    measure = _RateRuns(name, w, run, slos, spec.objective.max_failed_fraction)
    runs, pooled = measure.runs, measure.pooled

    try:
        result = capacity.search(
            measure,
            start_rate(spec.objective, w),
            slos,
            resolution=c.resolution,
            max_runs=c.max_runs,
            max_repeats=c.max_repeats,
            min_rps=c.min_rps,
            max_rps=max(min(c.max_rps, capacity.shown_rps(w.num_prompts, slos)), c.min_rps),
            beat_rps=capacity.race_rps(beat, c.resolution) if beat is not None else None,
            bracket=bracket,
            max_steps=c.max_steps,
        )
    except _StepFailed as exc:
        return _summed(exc.m, runs)
    steps = result.steps
    at = [i for i, s in enumerate(steps) if s.feasible and s.rate_rps == result.capacity_rps]
    if not at:  # no rate met the SLOs: the lowest rate run whole, else the lowest
        whole_first = [(bool(s.pruned_reason), s.rate_rps, i) for i, s in enumerate(steps)]
        at = [min(whole_first)[2]]
    chosen = pooled[steps[at[-1]].rate_rps][-1]  # its runs pooled
    # the step's copy of the chosen run's metrics
    goodput = steps[at[-1]].metrics.get("request_goodput") if result.capacity_rps > 0 else None
    out = _summed(chosen, runs)
    out.pruned_reason, out.pruned_at_s, out.engine_full_s = None, None, None
    out.rate_steps = [step_record(name, s) for s in steps]
    out.capacity = CapacityResult(
        capacity_rps=result.capacity_rps,
        goodput_rps=goodput,
        resolved=result.resolved,
        capped=result.capped,
        runs=result.runs,
        above_rps=result.bracket[1],  # the lowest rate that broke an SLO (None: none did)
        capacity_rps_low=result.low_rps,
        capacity_rps_high=result.high_rps,
    )
    return out


def pooled_runs(
    done: Sequence[Measurement], w: WorkloadSpec, slo_metrics: list[str]
) -> Measurement:
    """The runs at one rate as one: every request of the whole runs over the sum of their
    durations, with bootstrap intervals for the headline figures and the SLOs' (`slo_metrics`).
    None whole: the last run (stopped early, its partial figures)."""
    from tuner.measure.metrics import CI_METRICS, confidence_intervals, run_metrics

    whole = [m for m in done if not m.pruned_reason]
    if not whole:
        return done[-1]
    done, last = whole, whole[-1]
    records = [r for m in done for r in m.records]
    duration = sum((m.metrics or {}).get("duration", 0.0) for m in done)
    if len(done) == 1:  # its own figures and intervals, and the SLOs' intervals it lacks
        metrics, ci = dict(last.metrics or {}), dict(last.ci)
    else:
        metrics, ci = run_metrics(records, duration, w), {}
    keys = [k for k in [*CI_METRICS, *slo_metrics] if k not in ci]
    ci.update(confidence_intervals(records, duration, metrics, seed=w.seed, keys=keys))
    return replace(last, metrics=metrics, records=records, ci=ci)


def capacity_to_beat(
    objective: Objective, points: Sequence[TrialPoint], host: str | None
) -> Beat | None:
    """What a trial's capacity search must beat, from the study's trials as it started
    (`points`) and its host's reference (None: the objective has no such rule, or no capacity
    is found yet)."""
    top, ref = best(points), reference(points, host)
    beat = objective.to_beat(
        top.capacity_rps if top is not None else None,
        ref.capacity_rps if ref is not None else None,
    )
    found = top.record.capacity if top is not None else None
    if beat is None or found is None:
        return beat
    return replace(beat, best_high_rps=capacity.race_high(found.capacity_rps_high, found.above_rps))


def _summed(m: Measurement, runs: Sequence[Measurement]) -> Measurement:
    """`m` with the workload and engine seconds, and the prefix cache, of every run it took."""
    return replace(
        m,
        workload_s=sum(r.workload_s or 0.0 for r in runs),
        engine_s=sum(r.engine_s for r in runs),
        prefix_cache_runs=[c for r in runs for c in r.prefix_cache_runs],
    )


def measure_all(
    spec: Measuring,
    objective: Objective,
    run: RunFn,
    beat: Beat | None = None,
    bracket: tuple[float, float] | None = None,
) -> Measurement:
    """Every run of one trial against one engine start, as one Measurement: what the
    objective runs (`Objective.measure`), each workload's run or rate search
    (`bracket`: where the single workload's search starts, `search_capacity`)."""

    def search(name: str, w: WorkloadSpec) -> Measurement:
        return search_capacity(spec, name, w, run, beat, None if name else bracket)

    return objective.measure(spec.workload, run, search, lambda parts: _combined(spec, parts))


def _combined(spec: Measuring, parts: dict[str, Measurement]) -> Measurement:
    """The scenarios' runs as one trial: each scenario's figures apart, and the metrics of
    every request pooled (all scenarios' requests over the sum of their durations)."""
    from tuner.measure.metrics import run_metrics

    records = [r for m in parts.values() for r in m.records]
    duration = sum((m.metrics or {}).get("duration", 0.0) for m in parts.values())
    first = next(iter(parts.values()))
    weights = {s.name: s.weight for s in spec.scenarios}
    return replace(
        _summed(first, list(parts.values())),
        metrics=run_metrics(records, duration, spec.workload),
        ci={},
        records=records,
        rate_steps=[s for m in parts.values() for s in m.rate_steps],
        capacity=None,
        scenarios={
            name: ScenarioEntry(weights[name], dict(m.metrics or {}), dict(m.ci), m.capacity)
            for name, m in parts.items()
        },
    )
