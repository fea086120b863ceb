"""Capacity with its 95 % interval (issue 46): each rate step judged by its SLO figures'
intervals, a straddling step measured again on a fresh seed, the interval stored, compared
and printed. In-process and cheap: synthetic curves and a fake run function."""

from __future__ import annotations

import math

import numpy as np
import pytest
from capacity_curves import Runs, seeded_step

from tuner import trial as tr
from tuner.measure.capacity import (
    BREAKS,
    HOLDS,
    INTERVAL_RUNS,
    UNSURE,
    Beat,
    Step,
    capacity_interval,
    clearly_above,
    judged,
    next_rate,
    next_to_confirm,
    race_rps,
    rate_verdict,
    run_excess,
    search,
    seed_spread,
    step_verdict,
    stopped_excess,
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


def test_a_run_s_excess_is_its_worst_slo_against_the_limit_and_a_stop_a_lower_bound() -> None:
    two = parse_slo("p99_ttft_ms<=1000,output_throughput>=100")
    excess, whole = run_excess({**DONE, "p99_ttft_ms": 500.0, "output_throughput": 50.0}, two)
    assert whole and excess == pytest.approx(math.log(2))  # throughput half its floor
    assert run_excess({**DONE, "p99_ttft_ms": 500.0}, SLOS) == (pytest.approx(-math.log(2)), True)
    proved = stopped_excess({"p99_ttft_ms<=1000": 0.25})
    assert proved == pytest.approx(math.log(1.25))
    stopped = run_excess({**DONE, "p99_ttft_ms": 300.0}, SLOS, pruned=True, at_least=proved)
    assert stopped == (pytest.approx(math.log(1.25)), False)  # its partial P99 says nothing
    assert run_excess({**DONE}, SLOS) == (0.0, False)  # the SLO's figure missing: broken


def _runs(rate: float, *excess: float, stopped: int = 0) -> Step:
    """A rate's runs by their excess (the first `stopped` stopped early), not yet judged."""
    whole = tuple(i >= stopped for i in range(len(excess)))
    fits = sum(excess) <= 0 and all(whole)
    return Step(rate, {}, fits, None, UNSURE, len(excess), {}, (), excess, whole)


def test_a_rate_is_sure_when_the_seeds_t_bound_clears_the_limit() -> None:
    close = _runs(6, -0.30, -0.32)  # a lucky pair of close seeds
    spread, df, measured = seed_spread([close])
    assert measured == 1 and df == 3 and 0.1 < spread < 0.15  # the prior keeps it honest
    assert rate_verdict(_runs(5, -0.2), spread, df) == UNSURE
    assert rate_verdict(_runs(5, -0.5), spread, df) == HOLDS
    assert rate_verdict(_runs(9, 0.5), spread, df) == BREAKS
    assert rate_verdict(_runs(9, 0.3, 0.35, 0.32), spread, df) == BREAKS  # three seeds agree
    assert rate_verdict(_runs(9, 0.2, -0.1), spread, df) == UNSURE  # they disagree
    assert rate_verdict(_runs(5, -0.5), spread, df, measured=0) == UNSURE  # no spread seen
    assert rate_verdict(_runs(5, -0.9, 0.01, stopped=1), spread, df) == UNSURE  # one stopped
    # one seed per rate: never sure, however far from the limit
    assert {s.verdict for s in judged([_runs(2, -2.0), _runs(20, 2.0)])} == {UNSURE}


def test_the_repeats_go_where_one_run_settles_an_end_else_past_the_rates_measured() -> None:
    steps = judged([_runs(4, -0.6), _runs(6, -0.3, -0.32), _runs(7, -0.05), _runs(8, 0.02)])
    assert [s.verdict for s in steps] == [HOLDS, HOLDS, UNSURE, UNSURE]
    assert capacity_interval(steps, 7.0) == (6.0, None)
    assert next_to_confirm(steps, 7.0, HOLDS) == steps[2]  # nearer than 6 (sure already)
    # bounded by 6 already: 7 could narrow it, but one run will not settle it; last resort
    assert next_rate(steps, 7.0, HOLDS, (0.05, 100.0)) is None
    assert next_rate(steps, 7.0, HOLDS, (0.05, 100.0), narrow=True) == 7.0
    # above: 8 (at the limit) cannot settle, and no rate bounds it: a new rate further out
    new = next_rate(steps, 7.0, BREAKS, (0.05, 100.0))
    assert new is not None and new >= 8.0 * 1.1
    assert next_rate(steps, 7.0, BREAKS, (0.05, 8.5)) == 8.5  # no further than the ceiling
    assert next_rate(steps, 7.0, BREAKS, (0.05, 8.0)) == 8.0  # no room: the rate there
    assert next_rate(steps, 7.0, BREAKS, (0.05, 100.0), extend=False) == 8.0  # one new rate
    far = judged([*steps, _runs(12, 0.35)])
    assert next_to_confirm(far, 7.0, BREAKS) == far[-1]  # one more run settles it
    spent = judged([_runs(8, 0.02, 0.1, -0.03, 0.05)])  # out of runs
    assert next_to_confirm(spent, 7.0, BREAKS) is None


def noisy_curve(knee_rps: float, spread: float, seed: int = 0, power: float = 0.0):
    """P99 TTFT = 200 / (1 − rate / saturation) ms (1000 ms exactly at the knee; with `power`,
    1000 × (rate / knee)^power: a flat curve, as a short run's near its knee) × a seed's own
    factor (log-normal, `spread`), with a request-bootstrap-like interval of ± 5 %: each run's
    interval is narrower than the spread between seeds, as on the simulated engine."""
    saturation = knee_rps / 0.8
    rng = np.random.default_rng(seed)
    calls: list[tuple[float, int, bool]] = []
    said: Runs = {}

    def measure(rate: float, repeat: int, whole: bool = False) -> Step:
        calls.append((rate, repeat, whole))
        load = rate / saturation
        typical = 1000 * (rate / knee_rps) ** power if power else 200 / max(1 - load, 2e-4)
        p99 = typical * math.exp(spread * rng.standard_normal())
        metrics = {**DONE, "p99_ttft_ms": p99, "request_throughput": min(rate, saturation)}
        return seeded_step(rate, repeat, metrics, said, SLOS)

    return measure, calls


@pytest.mark.parametrize("seed", range(6))
def test_the_interval_comes_from_rates_the_seeds_settled_within_the_budget(seed: int) -> None:
    measure, calls = noisy_curve(10.0, 0.12, seed)
    got = search(measure, 4.0, SLOS, resolution=0.05, max_runs=8, max_repeats=4)
    extra = [(r, k) for r, k, whole in calls if whole]
    assert extra and len(extra) <= 4  # at most 4 extra runs, each whole
    measured = [c[:2] for c in calls]
    assert all((r, k - 1) in measured for r, k in extra if k)  # a repeat: the next seed
    assert got.runs == len(calls) == sum(s.runs for s in got.steps) and len(got.steps) <= 12
    for bound, side in ((got.low_rps, HOLDS), (got.high_rps, BREAKS)):
        if bound:  # a bound is a rate the seeds settled
            (step,) = [s for s in got.steps if s.rate_rps == bound]
            assert step.sure == side
    assert got.low_rps <= got.capacity_rps and (got.high_rps or math.inf) > got.capacity_rps
    # without a budget: never repeated, and no rate is sure
    measure, calls = noisy_curve(10.0, 0.12, seed)
    bare = search(measure, 4.0, SLOS, resolution=0.05, max_runs=8, max_repeats=0)
    assert all(k == 0 for _, k, _ in calls) and (bare.low_rps, bare.high_rps) == (0.0, None)


@pytest.mark.parametrize("max_steps", [3, 4])
def test_a_step_budget_still_gives_a_found_capacity_the_runs_to_close_its_interval(
    max_steps: int,
) -> None:
    """Under a step budget the bisection spent, every search ended (0, ?): no rate is sure
    before the seeds' spread is measured. A search that found a capacity (the incumbent once
    it ends: the first config, or one that held the race) gets `INTERVAL_RUNS` more, the first
    a repeat that measures the spread (`_spread_first`), and reads a closed interval around
    its capacity; a lost race still costs one run."""
    for seed in range(4):
        for beat in (None, Beat(6.0, 1.0, 6.5)):
            measure, calls = noisy_curve(10.0, 0.12, seed)
            got = search(
                measure, 4.0, SLOS, resolution=0.05, max_runs=8, max_repeats=4,
                max_steps=max_steps, beat_rps=None if beat is None else race_rps(beat, 0.05),
                bracket=None if beat is None else (7.0, 11.0),  # the config's own prediction
            )  # fmt: skip
            assert not got.beaten and len(calls) <= max_steps + INTERVAL_RUNS
            assert [k for _, k, _ in calls if k][:1] == [1]  # a repeat
            assert 0 < got.low_rps <= got.capacity_rps < (got.high_rps or 0), (seed, beat, got)
    measure, calls = noisy_curve(10.0, 0.12, 0)
    lost = search(measure, 4.0, SLOS, max_steps=3, beat_rps=race_rps(Beat(12.0, 1.0), 0.05))
    assert lost.beaten and len(calls) == 1


def test_the_interval_holds_the_knee_at_95_percent_on_a_flat_noisy_curve() -> None:
    """Where the seeds' typical P99 crosses the limit (the knee) lies in the interval in at
    least 90 % of 60 searches (95 % by design; 60 draws), on a curve as flat near its knee as
    the simulated 256/128 study's (P99 ∝ rate^1.2) with seeds 15 % apart; and the interval's
    ends pass issue 46's check (a fresh seed keeps the SLO at 0.9 × the low end and breaks it
    at 1.15 × the high end, 2 of 3 seeds) with probability at least 0.8 on average (no high
    end: fails). Now 60 of 60 and 0.88 (7 with no high end); the rule of two agreeing seeds:
    78 % and 0.73 on these 60 seeds."""
    from scipy.stats import norm

    spread, power, covered, passed = 0.15, 1.2, 0, 0.0
    for seed in range(60):
        measure, _ = noisy_curve(10.0, spread, seed, power)
        got = search(measure, 4.0, SLOS, resolution=0.05, max_runs=8, max_repeats=4)
        high = got.high_rps or math.inf
        covered += got.low_rps <= 10.0 < high
        low = got.low_rps
        kept = norm.cdf(-power * math.log(0.9 * low / 10.0) / spread) if low else 0.0
        broke = norm.cdf(power * math.log(1.15 * high / 10.0) / spread) if got.high_rps else 0.0
        passed += (3 * kept**2 - 2 * kept**3) * (3 * broke**2 - 2 * broke**3)
    assert covered >= 54 and passed >= 0.8 * 60


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
                "capacity": {"max_runs": 6, "max_repeats": 4, "resolution": 0.1},
            },
        }
    )
    seeds: list[tuple[float, int]] = []
    wholes: list[bool] = []

    def run(name: str, w: WorkloadSpec, /, *, whole: bool = False) -> Measurement:
        seeds.append((w.request_rate, w.seed))
        wholes.append(whole)
        typical = 200.0 * w.request_rate  # a mean TTFT that grows with the rate
        records = _records(w.num_prompts, typical, w.seed)
        metrics = run_metrics(records, 4.0, w)
        ci = confidence_intervals(records, 4.0, metrics, seed=w.seed)
        return Measurement(metrics=metrics, ci=ci, records=records, workload_s=4.0, engine_s=4.0)

    m = search_capacity(spec, "", spec.workload, run)
    found = m.capacity
    assert found is not None and found.runs == len(seeds) and m.workload_s == 4.0 * len(seeds)
    steps = m.rate_steps
    assert sum(s.runs for s in steps) == len(seeds) <= 6 + 4
    assert sum(wholes) <= 4 and all(wholes[len(seeds) - sum(wholes) :])  # the extra runs whole
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


def test_the_trials_table_says_what_a_capacity_interval_is() -> None:
    """`tuner trials` printed `0.07125 (0-?)` with no word on what the two ends are (the walk
    of issue 49/50); the note says it once, only where a cell shows an interval."""
    from tuner.results.views import interval_notes, trials_frame

    found = tr.CapacityResult(0.07125, capacity_rps_low=0.0, capacity_rps_high=None)
    assert interval_notes(trials_frame([_point(found)])) == [words.INTERVAL_NOTE]
    old = _point(tr.CapacityResult.decode({"capacity_rps": 7.76, "resolved": True}) or found)
    assert interval_notes(trials_frame([old])) == []  # stored before the intervals
    assert "(0: none did)" in words.INTERVAL_NOTE and "(?: none did)" in words.INTERVAL_NOTE
