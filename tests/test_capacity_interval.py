"""Capacity with its 95 % interval (issue 46): each rate step judged by its SLO figures'
intervals, a straddling step measured again on a fresh seed, the interval stored, compared
and printed. In-process and cheap: synthetic curves and a fake run function."""

from __future__ import annotations

import math

import numpy as np

from tuner import trial as tr
from tuner.measure.capacity import (
    BREAKS,
    HOLDS,
    UNSURE,
    Step,
    capacity_interval,
    clearly_above,
    meets,
    search,
    step_verdict,
)
from tuner.measure.measurement import Measurement
from tuner.measure.records import RequestRecord
from tuner.results.capacity_words import capacity_json
from tuner.results.views import trials_records
from tuner.runners.load_runs import search_capacity
from tuner.spec.slo import parse_slo
from tuner.spec.study import StudySpec
from tuner.spec.workload import WorkloadSpec
from tuner.trial import TrialPoint, words

SLOS = parse_slo("p99_ttft_ms<=1000")
DONE = {"completed": 80.0, "failed": 0.0}


def _verdict(p99: float, ci: tuple[float, float] | None, pruned: bool = False) -> str:
    metrics = {**DONE, "p99_ttft_ms": p99}
    return step_verdict(metrics, {} if ci is None else {"p99_ttft_ms": ci}, SLOS, pruned=pruned)


def test_a_step_holds_breaks_or_is_unsure_by_its_interval() -> None:
    assert _verdict(900, (800, 950)) == HOLDS
    assert _verdict(900, (850, 1100)) == UNSURE  # straddles 1000 ms
    assert _verdict(1200, (950, 1300)) == UNSURE
    assert _verdict(1200, (1050, 1300)) == BREAKS
    assert _verdict(900, None) == HOLDS and _verdict(1100, None) == BREAKS  # no interval
    assert _verdict(900, (800, 950), pruned=True) == BREAKS  # stopped early: broken for sure
    failing = {"completed": 60.0, "failed": 20.0, "p99_ttft_ms": 500.0}
    assert step_verdict(failing, {}, SLOS, failed_fraction_max=0.05) == BREAKS
    assert step_verdict({**DONE}, {}, SLOS) == BREAKS  # the SLO's figure is missing
    lower = parse_slo("output_throughput>=100")
    out = {**DONE, "output_throughput": 110.0}
    assert step_verdict(out, {"output_throughput": (90.0, 120.0)}, lower) == UNSURE
    assert step_verdict(out, {"output_throughput": (105.0, 120.0)}, lower) == HOLDS


def _step(rate: float, verdict: str) -> Step:
    return Step(rate, {}, verdict != BREAKS, verdict=verdict)


def test_the_interval_is_the_highest_sure_hold_and_the_lowest_sure_break_around_it() -> None:
    steps = [_step(r, v) for r, v in [(4, HOLDS), (8, UNSURE), (6, HOLDS), (7, UNSURE)]]
    steps += [_step(12, BREAKS), _step(9, BREAKS)]
    assert capacity_interval(steps, 8.0) == (6.0, 9.0)
    assert capacity_interval(steps[:4], 8.0) == (6.0, None)  # none broke for sure
    assert capacity_interval([_step(2, BREAKS)], 0.0) == (0.0, 2.0)
    # a sure hold above the estimate (a noisy curve) does not widen the interval upwards
    assert capacity_interval([_step(5, HOLDS), _step(6, BREAKS), _step(7, HOLDS)], 5.0) == (
        5.0,
        6.0,
    )


def noisy_curve(knee_rps: float, half_width: float):
    """P99 TTFT = 200 / (1 − rate / saturation) ms (1000 ms exactly at the knee), its 95 %
    interval ± `half_width` relative, narrowing as 1 / √runs when a rate is repeated."""
    saturation = knee_rps / 0.8
    calls: list[tuple[float, int]] = []

    def measure(rate: float, repeat: int) -> Step:
        calls.append((rate, repeat))
        load = rate / saturation
        p99 = 200 / (1 - load) if load < 1 else 1e6
        half = half_width * p99 / math.sqrt(repeat + 1)
        metrics = {**DONE, "p99_ttft_ms": p99, "request_throughput": min(rate, saturation)}
        ci = {"p99_ttft_ms": (p99 - half, p99 + half)}
        verdict = step_verdict(metrics, ci, SLOS)
        return Step(rate, metrics, meets(metrics, SLOS), None, verdict, repeat + 1, ci)

    return measure, calls


def test_a_straddling_step_is_measured_again_within_the_repeat_budget() -> None:
    measure, calls = noisy_curve(10.0, 0.3)
    got = search(measure, 4.0, SLOS, resolution=0.05, max_runs=8, max_repeats=3)
    repeats = [(r, k) for r, k in calls if k > 0]
    assert 1 <= len(repeats) <= 3  # the budget: at most 3 extra runs in the whole search
    for rate, k in repeats:  # only a rate whose previous interval straddled the limit
        previous = next(s for s in got.steps if s.rate_rps == rate)
        assert (rate, k - 1) in calls and previous.runs >= k + 1
    assert got.runs == len(calls) == sum(s.runs for s in got.steps)
    assert len(got.steps) <= 8  # rates; the repeats come on top
    high = got.high_rps
    assert high is not None and got.low_rps <= got.capacity_rps < high
    assert got.low_rps <= 10.0 <= high  # the knee lies inside the interval
    # without a budget: never repeated, the same estimate, an interval no narrower
    measure, calls = noisy_curve(10.0, 0.3)
    bare = search(measure, 4.0, SLOS, resolution=0.05, max_runs=8, max_repeats=0)
    assert all(k == 0 for _, k in calls) and bare.low_rps <= got.low_rps


def test_clearly_above_uses_the_intervals_else_the_resolution() -> None:
    assert clearly_above(8.0, (7.0, 9.0), 6.0, (5.0, 7.0), 0.05)  # held where the other broke
    assert not clearly_above(8.0, (6.9, 9.0), 6.0, (5.0, 7.0), 0.05)  # overlap: +33 % is luck
    assert not clearly_above(8.0, (7.5, 9.0), 6.0, (5.0, None), 0.05)  # the other never broke
    assert clearly_above(8.0, None, 6.0, (5.0, 7.0), 0.05)  # stored without one: resolution
    assert not clearly_above(6.2, None, 6.0, None, 0.05)


def _records(n: int, ttft_ms: float, seed: int) -> list[RequestRecord]:
    rng = np.random.default_rng(seed)
    ttft = rng.gamma(4.0, ttft_ms / 4.0 / 1000.0, size=n)
    return [
        RequestRecord(
            prompt_len=64,
            success=True,
            output_tokens=8,
            ttft_s=float(t),
            itl_s=[0.01] * 7,
            latency_s=float(t) + 0.07,
            start_s=i * 0.1,
        )
        for i, t in enumerate(ttft)
    ]


def test_search_capacity_pools_the_repeats_of_a_rate_on_fresh_seeds() -> None:
    """The runner's side: a repeat is the same rate on the next seed (fresh prompts and
    arrivals), pooled with the runs before it; the step, the search and the trial say how many
    runs it took, and the capacity carries its interval."""
    from tuner.measure.metrics import confidence_intervals, run_metrics

    spec = StudySpec.model_validate(
        {
            "name": "s",
            "engine": {"model": "m"},
            "search_space": {"parameters": {"max-num-seqs": {"type": "int", "low": 1, "high": 8}}},
            "workload": {"num_prompts": 40, "request_rate": 2.0, "seed": 7},
            "objective": {
                "mode": "capacity",
                "slo": ["p99_ttft_ms<=1000"],
                "capacity": {"max_runs": 6, "max_repeats": 2, "resolution": 0.1},
            },
        }
    )
    seeds: list[tuple[float, int]] = []

    def run(name: str, w: WorkloadSpec) -> Measurement:
        seeds.append((w.request_rate, w.seed))
        typical = 200.0 * w.request_rate  # a mean TTFT that grows with the rate
        records = _records(w.num_prompts, typical, w.seed)
        metrics = run_metrics(records, 4.0, w)
        ci = confidence_intervals(records, 4.0, metrics, seed=w.seed)
        return Measurement(metrics=metrics, ci=ci, records=records, workload_s=4.0, engine_s=4.0)

    m = search_capacity(spec, "", spec.workload, run)
    found = m.capacity
    assert found is not None and found.runs == len(seeds) and m.workload_s == 4.0 * len(seeds)
    steps = m.rate_steps
    assert sum(s.runs for s in steps) == len(seeds) <= 6 + 2
    assert all(s.verdict in (HOLDS, BREAKS, UNSURE) and "p99_ttft_ms" in s.ci for s in steps)
    repeated = [s for s in steps if s.runs > 1]
    assert repeated, "a step near the knee straddles 1000 ms and is measured again"
    for s in repeated:  # the study's seed first, then the next ones: fresh prompts
        at = [seed for rate, seed in seeds if rate == s.rate_rps]
        assert at == [7 + k for k in range(s.runs)]
        assert s.metrics["completed"] == 40.0 * s.runs  # every run's requests pooled
    assert found.capacity_rps_low is not None and found.capacity_rps_low <= found.capacity_rps
    assert found.capacity_rps_high is None or found.capacity_rps_high > found.capacity_rps


def _point(found: tr.CapacityResult) -> TrialPoint:
    attrs = {tr.CAPACITY_RPS: found.capacity_rps, tr.CAPACITY: found.encode()}
    return TrialPoint(1, "COMPLETE", {}, {"p99_ttft_ms": 900.0}, "feasible", attrs=attrs)


def test_the_capacity_prints_and_lists_with_its_interval() -> None:
    found = tr.CapacityResult(7.76, capacity_rps_low=6.9, capacity_rps_high=9.5)
    assert words.capacity_rate(found) == "7.76 req/s (6.9-9.5)"
    assert words.rate(7.76, False, (6.9, None)) == "7.76 req/s (6.9-?)"
    assert words.rate(5.0, True, (5.0, None)) == f"≥ 5 req/s {words.CAPPED_NOTE}"
    p = _point(found)
    shown = capacity_json(p)
    assert shown is not None and shown["text"] == "7.76 req/s (6.9-9.5)"
    assert (shown["capacity_rps_low"], shown["capacity_rps_high"]) == (6.9, 9.5)
    (row,) = trials_records([p])
    assert (row["capacity_rps_low"], row["capacity_rps_high"]) == (6.9, 9.5)
    # stored before the intervals: the figure alone, the keys null
    old = _point(tr.CapacityResult.decode({"capacity_rps": 7.76, "resolved": True}) or found)
    assert old.capacity_interval is None and words.capacity_rate(old.record.capacity) == (
        "7.76 req/s"
    )
    (row,) = trials_records([old])
    assert row["capacity_rps_low"] is None and row["capacity_rps_high"] is None
