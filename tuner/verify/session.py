"""One `tuner verify`: the shipped config's workload, cut to the caps, against a running engine,
judged against the study's stored figures (`compare`), with what changed (`changes`), and
written down (`outcome`); the user's request log beside it is `request_log`'s.

Nothing here restarts, resets or reconfigures the engine: it sends GETs to read the engine's
own state (`engine_info`) and the capped workload, with no warm-ups and no prefix-cache reset
(a production engine's cache stays as its traffic left it: docs/verify.md).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tuner.errors import UserError
from tuner.measure.metrics import CI_METRICS
from tuner.measure.mixes import objective_of
from tuner.measure.modes import Objective
from tuner.results.selection import Selection
from tuner.runners.trial_runner import workload_tokenizer
from tuner.spec.metric_keys import HEADLINE_METRICS
from tuner.spec.space import serve_config, serve_env
from tuner.spec.study import StudySpec
from tuner.spec.values import Params
from tuner.trial import StudyRecord, TrialPoint
from tuner.verify import compare
from tuner.verify.capacity import at_capacity, verified_workload
from tuner.verify.caps import INITIAL_TEST_REQUESTS, CappedWorkload, Caps, capped
from tuner.verify.changes import (
    WARM_START_K,
    flag_changes,
    platform_changes,
    retune_lines,
)
from tuner.verify.engine_info import Bound, EngineInfo, MetricsWatch, read_engine_info
from tuner.verify.outcome import Findings, Outcome, Sent, written
from tuner.verify.predict import predict_traffic
from tuner.verify.request_log import Traffic, traffic
from tuner.workload.benchmark import BenchmarkAborted, BenchmarkResult, run_benchmark
from tuner.workload.datasets import build_requests
from tuner.workload.probe import server_model_cards
from tuner.workload.request import BenchRequest
from tuner.workload.tokenizer import HFTokenizer


@dataclass(frozen=True)
class Target:
    """What verify checks against: the study's shipped config and the spec it ran under."""

    study_name: str
    choice: Selection
    spec: StudySpec
    mean_engine_s: float | None  # the study's measured trials' mean engine time (the cost)
    record: StudyRecord | None = None  # the study and its trials: what calibrates the
    points: tuple[TrialPoint, ...] = ()  # simulator for a prediction of the user's traffic
    warm_configs: int = WARM_START_K  # of this study's configs a warm start would take

    @functools.cached_property
    def objective(self) -> Objective:
        """The study's objective object, built once for the whole verify."""
        return objective_of(self.spec)


def expected_flags(spec: StudySpec, params: Params) -> dict[str, object]:
    """The exported command's flags (dash names) and `VLLM_*` variables, by value."""
    flags = {k: v for k, v in serve_config(spec, params).items() if k not in _NOT_FLAGS}
    flags.update({k: v for k, v in serve_env(spec, params).items() if k.startswith("VLLM_")})
    return flags


_NOT_FLAGS = ("model", "served-model-name")


def served_model(spec: StudySpec, base_url: str, api_key: str | None) -> str:
    """The model name the study serves; an engine that serves another is not the one asked
    for (a UserError: nothing is sent to it)."""
    name = spec.engine.served_model_name or spec.engine.deployed_model
    cards = server_model_cards(base_url, api_key)
    served = [c["id"] for c in cards or []]
    if cards is not None and name not in served:
        # the study's own engine name (a simulated study's built-in model): the same model,
        # served under another name than the exported command's
        hint = (
            f"; the study ran it as {spec.engine.model!r}: start that engine with "
            f"--served-model-name {name}, as the exported command serves it"
            if spec.engine.model in served
            else ""
        )
        raise UserError(
            f"{base_url} serves {', '.join(served) or 'no model'}, not the study's {name!r}: "
            f"not the engine this study tuned{hint}"
        )
    return name


def predicted(target: Target, mix: Traffic) -> Traffic:
    """`mix` with what the calibrated simulator predicts for the log's traffic, when it is
    outside the study's range (`tuner.verify.predict`)."""
    if not mix.changed or target.record is None:
        return mix
    figures = predict_traffic(
        target.spec,
        target.objective,
        target.record,
        target.points,
        target.choice.params,
        mix.studied,
        mix.logged,
        figure_names(target),
    )
    return replace(mix, predicted=figures)


def figure_names(target: Target) -> list[str]:
    """The figures verify compares: the headline ones, the SLO's, those with intervals."""
    limits = target.choice.limits or target.spec.slo_limits()
    return list(dict.fromkeys([*HEADLINE_METRICS, *(lim.metric for lim in limits), *CI_METRICS]))


def run_verify(
    target: Target, base_url: str, caps: Caps, api_key: str | None, log: Path | None = None
) -> Outcome:
    spec = target.spec
    if target.objective.served_workload(spec.workload) is None:  # a scenario mix
        raise UserError(
            "verify measures one workload: a study with scenarios is not supported yet "
            '(docs/verify.md, "Not done yet")'
        )
    # a mistake here is found before anything is sent
    work = capped(verified_workload(spec, target.objective, target.choice.point), caps)
    tok = workload_tokenizer(spec)
    # the simulator's part, before sending
    mix = predicted(target, traffic(spec.workload, log, tok))
    model = served_model(spec, base_url, api_key)
    info = read_engine_info(base_url, model, api_key)
    requests = build_requests(work.workload, tok)
    deadline = time.monotonic() + caps.max_time_s
    started = time.time()
    if "/server_info" in info.sources:  # the engine states its flags
        result, stopped = _measure(work, base_url, model, requests, api_key, tok, deadline)
        return judge(target, base_url, caps, work, info, result, stopped, started, mix)
    with MetricsWatch(base_url, api_key) as watch:  # else bound them from what it does
        result, stopped = _measure(work, base_url, model, requests, api_key, tok, deadline)
    answered = [r.prompt_len for r in result.records if r.success] if result is not None else []
    bounds = watch.bounds(answered)
    return judge(target, base_url, caps, work, info, result, stopped, started, mix, bounds)


def _measure(
    work: CappedWorkload,
    base_url: str,
    model: str,
    requests: list[BenchRequest],
    api_key: str | None,
    tok: HFTokenizer,
    deadline: float,
) -> tuple[BenchmarkResult | None, str | None]:
    def over_time() -> str | None:
        return "the time cap (--max-time) was reached" if time.monotonic() > deadline else None

    try:
        result = run_benchmark(
            work.workload,
            base_url,
            model,
            requests,
            api_key=api_key,
            should_abort=over_time,
            tokenizer=tok,
            reset_cache=False,
        )
    except BenchmarkAborted as exc:
        # a request cut at the time cap (the initial test request's timeout is what is left of
        # it) stopped for the cap, whatever the client calls it
        return None, over_time() or exc.reason
    if result.metrics.get("completed", 0) == 0:
        first = next((r.error for r in result.records if r.error), "")
        return result, f"every request failed (first error: {first})"
    return result, None


def judge(
    target: Target,
    base_url: str,
    caps: Caps,
    work: CappedWorkload,
    info: EngineInfo,
    result: BenchmarkResult | None,
    stopped: str | None,
    started: float,
    mix: Traffic | None = None,
    bounds: Sequence[Bound] = (),
) -> Outcome:
    """What the run found against the study's shipped config: the engine's flags against
    the exported command's, each figure against the study's, the SLO, what changed, the
    verdict (at the shipped capacity in capacity mode) and when to tune again; written down
    by `outcome.written`."""
    mix = mix or Traffic()
    spec, point = target.spec, target.choice.point
    limits = list(target.choice.limits or spec.slo_limits())
    shipped = target.choice.params  # the exported command's flags (the smallest change)
    exported, engine = expected_flags(spec, shipped), _engine_flags(info, spec, shipped)
    flags = compare.flag_checks(exported, engine)
    inferred = compare.inferred_checks(exported, engine, bounds)  # `bounds`: from /metrics
    platform = [*platform_changes(info, spec.hardware, point), *mix.changed]
    moved_flags = flag_changes(flags, inferred)
    changes = [*moved_flags, *platform]
    measured = result.metrics if result is not None and stopped is None else {}
    names = figure_names(target)
    checks = compare.metric_checks(
        names,
        point.metrics,
        point.record.cis,
        measured,
        result.ci if result is not None else {},
        lighter=work.lighter,
    )
    capacity_rps = target.objective.stated_rate(point.capacity_rps or 0.0)
    found = (
        compare.not_measured(stopped)
        if stopped is not None
        else compare.verdict(checks, limits, measured, changes, spec.objective.max_failed_fraction)
    )
    if capacity_rps:  # the rate it was judged at
        found = at_capacity(found, work.workload.request_rate, capacity_rps, point.capacity_capped)
    sent = None if result is None else len(result.records) + INITIAL_TEST_REQUESTS
    retune = retune_lines(
        target.study_name,
        spec.budget,
        target.mean_engine_s,
        found,
        moved_flags,
        platform,
        target.warm_configs,
    )
    findings = Findings(
        Sent(base_url, work, info, started, sent),
        flags,
        checks,
        names,
        limits,
        measured,
        changes,
        capacity_rps,
        found,
        retune,
        inferred,
    )
    return written(target.study_name, target.choice, spec.hardware, caps, mix, findings)


def _engine_flags(info: EngineInfo, spec: StudySpec, params: Params) -> dict[str, object]:
    exported = expected_flags(spec, params)
    return {flag: info.flag(flag) for flag in exported if info.flag(flag) is not None}
