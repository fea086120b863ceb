"""The rate search (`tuner.measure.capacity`) on synthetic latency–load curves."""

from __future__ import annotations

import math

import numpy as np
import pytest
from capacity_curves import Runs, seeded_step

from tuner.measure.capacity import (
    Beat,
    Result,
    Step,
    headroom,
    meets,
    queue_limit_s,
    race_rps,
    search,
    shown_rps,
    step_prompts,
)
from tuner.spec.slo import parse_slo

SLOS = parse_slo("p99_ttft_ms<=1000")


def queue_curve(knee_rps: float, *, noise: float = 0.0, seed: int = 0):
    """An M/M/1-like curve: P99 TTFT = 200 / (1 − rate / saturation) ms, which crosses the
    1000 ms SLO exactly at `knee_rps`; overloaded, it serves the saturation rate."""
    saturation = knee_rps / 0.8  # 200 / (1 - 0.8) = 1000
    rng = np.random.default_rng(seed)
    calls: list[float] = []

    def measure(rate: float, _repeat: int = 0, _whole: bool = False) -> Step:
        calls.append(rate)
        load = rate / saturation
        p99 = 200 / (1 - load) if load < 1 else 1e6
        p99 *= 1 + noise * rng.standard_normal()
        metrics = {
            "completed": 100.0,
            "failed": 0.0,
            "p99_ttft_ms": p99,
            "request_throughput": min(rate, saturation),
        }
        return Step(rate, metrics, meets(metrics, SLOS))

    return measure, calls


def _capacity_step(got: Result) -> Step | None:
    """The run at the capacity rate, measured feasible, if any."""
    ok = [s for s in got.steps if s.feasible and s.rate_rps == got.capacity_rps]
    return ok[-1] if ok else None


@pytest.mark.parametrize("knee", [0.3, 2.0, 11.0, 75.0])
@pytest.mark.parametrize("start", [1.0, 8.0, 40.0])
def test_monotone_curve_finds_the_knee_within_the_resolution_and_the_run_cap(
    knee: float, start: float
) -> None:
    measure, calls = queue_curve(knee)
    got = search(measure, start, SLOS, resolution=0.05, max_runs=10)
    assert got.resolved and not got.capped
    exact = 1 + 1e-9  # the knee itself may round either way
    assert knee / 1.05 <= got.capacity_rps <= knee * exact
    assert got.runs == len(calls) <= 10
    lo, hi = got.bracket
    assert hi is not None and lo <= knee * exact and hi * exact >= knee and hi / lo <= 1.05
    assert _capacity_step(got) is not None


def test_the_first_run_places_the_bracket() -> None:
    # Overloaded at 40 req/s, the engine served its saturation (12.5 req/s): the next rate is
    # 0.8 × 12.5 = 10, not a blind halving to 20.
    measure, calls = queue_curve(10.0)
    search(measure, 40.0, SLOS)
    assert calls[1] == pytest.approx(10.0)
    # Feasible with a P99 of 250 ms against a 1000 ms limit: 4× headroom, so the next is 4×.
    measure, calls = queue_curve(100.0)
    search(measure, 5.0, SLOS)
    assert calls[1] == pytest.approx(5.0 * min(1000 / (200 / (1 - 5.0 / 125)), 4.0))


def test_noisy_curve_answers_a_rate_that_met_the_slo_and_stays_near_the_knee() -> None:
    errors = []
    for seed in range(20):
        measure, _ = queue_curve(10.0, noise=0.05, seed=seed)
        got = search(measure, 4.0, SLOS, resolution=0.05, max_runs=8)
        assert got.runs <= 8
        assert _capacity_step(got) is not None  # the answer was measured feasible
        errors.append(abs(got.capacity_rps - 10.0) / 10.0)
    assert float(np.median(errors)) < 0.1
    assert max(errors) < 0.35


def test_never_feasible_gives_zero_within_the_run_cap() -> None:
    def measure(rate: float, _repeat: int = 0) -> Step:
        return Step(rate, {"completed": 10.0, "p99_ttft_ms": 5000.0}, False)

    got = search(measure, 8.0, SLOS, max_runs=6, min_rps=0.5)
    assert got.capacity_rps == 0.0 and _capacity_step(got) is None
    assert got.runs <= 6
    assert min(s.rate_rps for s in got.steps) >= 0.5
    got = search(measure, 8.0, SLOS, max_runs=50, min_rps=0.5)
    assert got.resolved and got.steps[-1].rate_rps == 0.5  # infeasible even at the floor


def test_always_feasible_stops_at_the_ceiling_and_says_so() -> None:
    def measure(rate: float, _repeat: int = 0) -> Step:
        return Step(rate, {"completed": 10.0, "p99_ttft_ms": 900.0}, True)

    got = search(measure, 1.0, SLOS, max_runs=20, max_rps=50.0)
    assert got.capped and got.capacity_rps == 50.0 and got.bracket[1] is None
    assert not got.resolved
    got = search(measure, 1.0, SLOS, max_runs=3, max_rps=50.0)
    assert got.runs == 3 and not got.capped and got.capacity_rps < 50.0


def test_a_step_stopped_early_is_above_capacity() -> None:
    def measure(rate: float, _repeat: int = 0) -> Step:
        if rate > 6:
            return Step(rate, {}, False, pruned_reason="SLO broken for sure")
        return Step(rate, {"completed": 10.0, "p99_ttft_ms": 500.0}, True)

    got = search(measure, 4.0, SLOS, resolution=0.05, max_runs=12)
    assert 6 / 1.05 <= got.capacity_rps <= 6


def test_meets_and_headroom() -> None:
    ok = {"completed": 99.0, "failed": 1.0, "p99_ttft_ms": 500.0}
    assert meets(ok, SLOS, failed_fraction_max=0.05)
    assert not meets(ok, SLOS, failed_fraction_max=0.0)
    assert not meets({"completed": 0.0}, SLOS)
    assert headroom(ok, SLOS) == 2.0
    assert math.isinf(headroom({}, SLOS))


def test_bad_search_settings_are_refused() -> None:
    measure, _ = queue_curve(1.0)
    with pytest.raises(ValueError, match="resolution"):
        search(measure, 1.0, SLOS, resolution=0)


def test_a_config_that_loses_the_race_is_stopped_after_one_run_below_that_rate() -> None:
    # the race against the incumbent (docs/objective.md, "The race"): start at its rate
    measure, calls = queue_curve(2.0)
    got = search(measure, 0.5, SLOS, resolution=0.05, max_runs=7, beat_rps=3.0, max_repeats=4)
    assert got.beaten and calls == [3.0] and got.bracket == (0.0, 3.0)
    # a finished search whose capacity is "below 3": no point estimate, its interval (0, 3)
    assert got.capacity_rps == 0.0 and (got.low_rps, got.high_rps) == (0.0, 3.0)


def seeded_curve(knee_rps: float, spread: float):
    """`queue_curve` with each seed's own factor on P99 TTFT (log-normal, `spread`), the same
    for the same rate and repeat whoever asks (as an engine fed the same prompts and arrivals),
    and each run's verdict from a ± 5 % interval and its excess (`run_excess`); a rate's
    verdict is the search's to give (`rate_verdicts.judged`)."""
    saturation = knee_rps / 0.8
    said: Runs = {}

    def measure(rate: float, repeat: int, whole: bool = False) -> Step:
        rng = np.random.default_rng([repeat, round(rate * 1e6)])
        load = rate / saturation
        p99 = (200 / (1 - load) if load < 1 else 1e6) * math.exp(spread * rng.standard_normal())
        metrics = {"completed": 100.0, "failed": 0.0, "p99_ttft_ms": p99,
                   "request_throughput": min(rate, saturation)}  # fmt: skip
        return seeded_step(rate, repeat, metrics, said, SLOS)

    return measure


def _answer(got: Result) -> tuple[object, ...]:
    return got.capacity_rps, got.low_rps, got.high_rps, got.resolved, got.capped, got.bracket


@pytest.mark.parametrize("max_runs", [4, 8])
@pytest.mark.parametrize("beat", [3.0, 4.0, 9.0, 9.8, 10.4, 30.0])
@pytest.mark.parametrize("bracket", [None, (8.0, 11.0)])
def test_a_config_the_race_does_not_stop_reports_what_its_own_search_finds(
    max_runs: int, beat: float, bracket: tuple[float, float] | None
) -> None:
    """The invariant of early stopping's race against the best capacity so far (issue 50
    item 1): its run at the best's rate may stop a config (SLOs broken there); a config it does
    not stop is searched along the rates its own search takes unraced (from its own start or
    prediction, never stepping up from the best's rate), and reports what that search found,
    or the race's rate where its own run held there and none of its runs at or below broke."""
    kw = {"resolution": 0.05, "max_runs": max_runs, "max_repeats": 3, "bracket": bracket}
    own = search(seeded_curve(10.0, 0.08), 4.0, SLOS, **kw)  # type: ignore[arg-type]
    got = search(seeded_curve(10.0, 0.08), 4.0, SLOS, beat_rps=beat, **kw)  # type: ignore[arg-type]
    if got.beaten:
        assert [s.rate_rps for s in got.steps] == [beat] and got.capacity_rps == 0.0
        assert beat > 9.0  # broken only above the knee's noise
        return
    rates = [s.rate_rps for s in own.steps]
    assert [s.rate_rps for s in got.steps if s.rate_rps != beat or beat in rates] == rates
    assert got.runs == own.runs + (beat not in rates)
    if beat <= own.capacity_rps or any(s.rate_rps <= beat and not s.feasible for s in own.steps):
        assert _answer(got) == _answer(own)
    else:  # held at the best's rate, above its own search's answer
        assert got.capacity_rps == beat and got.low_rps <= own.capacity_rps
        assert got.high_rps is None or got.high_rps > beat


def test_identical_configs_raced_one_after_another_get_one_capacity_not_a_ratchet() -> None:
    """Issue 50 item 1: with `capacity.max_runs: 4` the first config's search ends unresolved
    at its lower bound; each later config started at the best capacity so far, held there and
    one resolution above, and read ~5 % more than the one before (6.65, 6.99, 7.33, 7.70 req/s
    on one simulated engine). Raced, they read what their own searches find: one capacity."""
    kw = {"resolution": 0.05, "max_runs": 4, "max_repeats": 4}
    first = search(seeded_curve(10.0, 0.08), 2.0, SLOS, **kw)  # type: ignore[arg-type]
    assert not first.resolved and first.capacity_rps < 10.0 / 1.05  # the case
    capacities, best = [], first.capacity_rps
    for _ in range(4):
        got = search(seeded_curve(10.0, 0.08), 2.0, SLOS, beat_rps=best, **kw)  # type: ignore[arg-type]
        capacities.append(got.capacity_rps)
        best = max(best, got.capacity_rps)
    assert capacities == [first.capacity_rps] * 4


def test_a_config_that_holds_the_race_is_searched_and_found() -> None:
    measure, calls = queue_curve(3.1)  # held at the race's 3.0: it may be better, find it
    got = search(measure, 0.5, SLOS, resolution=0.05, max_runs=7, beat_rps=3.0)
    assert not got.beaten and calls[0] == 3.0 and len(calls) > 2
    assert got.resolved and 3.1 / 1.05 <= got.capacity_rps <= 3.1 * (1 + 1e-9)
    measure, calls = queue_curve(6.0)  # twice the best: found like any search
    got = search(measure, 0.5, SLOS, resolution=0.05, max_runs=10, beat_rps=3.0)
    assert got.resolved and 6.0 / 1.05 <= got.capacity_rps <= 6.0 * (1 + 1e-9)


def test_the_race_is_run_where_the_incumbent_broke() -> None:
    """Its high end (sure, else its bracket's), never within one resolution of its capacity."""
    assert race_rps(Beat(3.0, 1.0), 0.05) == pytest.approx(3.15)
    assert race_rps(Beat(3.0, 1.0, best_high_rps=3.6), 0.05) == 3.6
    assert race_rps(Beat(3.0, 1.0, best_high_rps=3.05), 0.05) == pytest.approx(3.15)


@pytest.mark.parametrize("budget", [1, 3, 5])
def test_the_step_budget_ends_the_search_with_what_it_has(budget: int) -> None:
    measure, calls = queue_curve(7.3, noise=0.3)
    got = search(measure, 1.0, SLOS, max_runs=8, max_repeats=4, max_steps=budget)
    assert got.runs <= budget and len(calls) <= budget
    assert got.capacity_rps == 0 or got.low_rps <= got.capacity_rps


def test_a_step_reads_its_percentile_slos_inside_the_sample() -> None:
    assert step_prompts(parse_slo("p99_ttft_ms<=20000") + parse_slo("mean_tpot_ms<=80")) == 100
    assert step_prompts(parse_slo("p90_e2el_ms<=5000")) == 10
    assert step_prompts(parse_slo("p99.9_ttft_ms<=5000")) == 1000
    assert step_prompts(parse_slo("mean_ttft_ms<=800")) == 0


def short_run(num_prompts: int, capacity_rps: float, slos):
    """A fluid FCFS queue fed `num_prompts` at `rate`: request i arrives at i / rate and gets
    its first token at (i + 1) / capacity at the earliest. Above capacity the wait grows only
    while requests arrive, so a short run can meet a TTFT limit far above capacity."""

    def measure(rate: float, _repeat: int = 0) -> Step:
        waits = [max((i + 1) / capacity_rps - i / rate, 0.0) for i in range(num_prompts)]
        metrics = {
            "completed": float(num_prompts),
            "failed": 0.0,
            "p99_ttft_ms": 1000 * float(np.percentile(waits, 99)),
            "request_throughput": min(rate, capacity_rps),
        }
        return Step(rate, metrics, meets(metrics, slos))

    return measure


def test_a_short_workload_cannot_show_a_rate_above_capacity() -> None:
    """20 prompts against a 20 s TTFT limit, an engine that serves 1 req/s: at 4 req/s the
    last request waits 20 − 4.75 = 15.25 s, within the limit, so the search without a ceiling
    reports about 4× the capacity. The send phase must last 4 × the limit: 20 prompts show
    at most 0.25 req/s, a rate the engine does sustain."""
    slos = parse_slo("p99_ttft_ms<=20000")
    measure = short_run(20, 1.0, slos)
    unbounded = search(measure, 1.0, slos, max_runs=12)
    assert unbounded.capacity_rps > 3.0  # the artefact: far above what the engine serves
    ceiling = shown_rps(20, slos)
    assert ceiling == pytest.approx(0.25)
    bounded = search(measure, 1.0, slos, max_runs=12, max_rps=ceiling)
    assert bounded.capacity_rps == pytest.approx(0.25) and bounded.capped
    # 400 prompts send for long enough: the search finds the true capacity
    enough = shown_rps(400, slos)
    long = search(short_run(400, 1.0, slos), 1.0, slos, max_runs=12, max_rps=enough)
    assert enough == pytest.approx(5.0) and 0.95 <= long.capacity_rps <= 1.1


def test_the_queue_limit_is_the_tightest_ttft_or_e2el_ceiling() -> None:
    assert queue_limit_s(parse_slo("p99_ttft_ms<=20000,p90_e2el_ms<=8000")) == 8.0
    assert queue_limit_s(parse_slo("mean_tpot_ms<=80,p99_ttft_ms>=1")) is None
    assert shown_rps(64, parse_slo("mean_tpot_ms<=80")) == math.inf
