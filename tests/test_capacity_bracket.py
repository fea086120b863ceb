"""Capacity mode's search from a predicted capacity (issue 47): the bracket around it, the
stop once the interval is within the resolution, and the cost the night is planned with."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from test_capacity import queue_curve
from test_capacity_interval import _runs, noisy_curve

from tuner.fidelity.bands import PUBLISHED_BANDS
from tuner.fidelity.predict_skip import capacity_bracket
from tuner.measure.capacity import (
    BREAKS,
    HOLDS,
    Step,
    confirm,
    judged,
    predicted_bracket,
    search,
)
from tuner.measure.mixes import objective_of
from tuner.measure.modes import CAPACITY_RPS
from tuner.run.cost import length_only_runner, simulated_baseline
from tuner.runners.trial_runner import TrialContext
from tuner.spec.slo import parse_slo
from tuner.spec.study import StudySpec
from tuner.trial.payloads import SkipPrediction

SLOS = parse_slo("p99_ttft_ms<=1000")


def test_the_bracket_is_the_band_around_the_prediction_and_never_narrower_than_a_resolution():
    assert predicted_bracket(10.0, (0.81, 1.14), 0.05) == pytest.approx((8.1, 11.4))
    # a band that leaves out the prediction still brackets it
    assert predicted_bracket(10.0, (1.1, 1.3), 0.05) == pytest.approx((10.0, 13.0))
    below, above = predicted_bracket(10.0, (0.99, 1.01), 0.05)
    assert above / below == pytest.approx(1.05) and below < 10.0 < above


@pytest.mark.parametrize("off", [0.85, 1.0, 1.12])
def test_a_search_from_a_prediction_starts_at_its_bracket_and_takes_fewer_runs(off: float):
    knee = 10.0
    bracket = predicted_bracket(knee * off, (0.81, 1.14), 0.05)  # the prediction off by `off`
    measure, calls = queue_curve(knee)
    got = search(measure, 1.0, SLOS, resolution=0.05, max_runs=8, bracket=bracket)
    assert calls[0] == pytest.approx(bracket[1])  # the rate predicted to break: the shorter run
    if not got.steps[0].feasible:  # it broke: next, the one predicted to hold
        assert calls[1] == pytest.approx(bracket[0])
    assert got.resolved and knee / 1.05 <= got.capacity_rps <= knee * (1 + 1e-9)
    old_measure, old_calls = queue_curve(knee)
    old = search(old_measure, 1.0, SLOS, resolution=0.05, max_runs=8)
    assert old.capacity_rps == pytest.approx(got.capacity_rps, rel=0.05)
    assert len(calls) < len(old_calls)


def test_a_race_starts_at_its_rate_and_a_held_race_goes_on_to_the_bracket_s_break():
    measure, calls = queue_curve(10.0)
    search(measure, 1.0, SLOS, beat_rps=12.0, bracket=(8.0, 11.0))
    assert calls == [12.0]  # broke at the race's rate: stopped there
    measure, calls = queue_curve(10.0)
    search(measure, 1.0, SLOS, beat_rps=9.0, bracket=(8.0, 11.5))
    assert calls[:2] == [9.0, 11.5]  # held: on to where its own capacity should break


def test_the_repeats_stop_once_the_interval_is_within_the_resolution():
    calls: list[tuple[float, int]] = []

    def measure(rate: float, repeat: int, whole: bool = False) -> Step:
        calls.append((rate, repeat))
        return _runs(rate, *([-0.5] if rate < 10.2 else [0.3]) * (repeat + 1))

    settled = judged([_runs(10.0, -0.5, -0.5), _runs(10.4, 0.5, 0.5)])  # 4 % apart, both sure
    assert [s.verdict for s in settled] == [HOLDS, BREAKS]
    assert confirm(measure, list(settled), 10.0, 4, resolution=0.05) == 10.0
    assert calls == []
    wide = [_runs(10.0, -0.5, -0.5), _runs(10.4, 0.3)]  # the break not sure yet
    confirm(measure, wide, 10.0, 4, resolution=0.05)
    assert calls == [(10.4, 1)]  # one repeat settles it, then the search stops
    assert confirm(measure, list(settled), 10.0, 4) == 10.0  # no resolution: as before
    assert len(calls) == 1  # nothing could settle further anyway


@pytest.mark.parametrize("seed", range(4))
def test_on_noisy_seeds_the_search_from_a_prediction_stays_as_near_the_knee(seed: int):
    bracket = predicted_bracket(9.5, (0.81, 1.14), 0.05)
    measure, calls = noisy_curve(10.0, 0.08, seed)
    new = search(measure, 4.0, SLOS, max_repeats=4, bracket=bracket)
    old_measure, old_calls = noisy_curve(10.0, 0.08, seed)
    old = search(old_measure, 4.0, SLOS, max_repeats=4)
    miss, old_miss = (abs(math.log(r.capacity_rps / 10.0)) for r in (new, old))
    assert miss <= max(old_miss, math.log(1.15))
    assert new.low_rps <= new.capacity_rps <= (new.high_rps or math.inf)
    assert len(calls) <= len(old_calls) + 1


def _capacity_spec(tokenizer: Path, **capacity: object) -> StudySpec:
    space = {"max-num-seqs": {"type": "int", "low": 8, "high": 256, "default": 256}}
    lengths = {"random_input_len": 2048, "random_output_len": 16}
    workload = {"dataset_name": "random", **lengths, "num_prompts": 24, "request_rate": 1.0}
    objective = {"mode": "capacity", "slo": ["p99_ttft_ms<=300"], "capacity": capacity}
    return StudySpec.model_validate(
        {
            "name": "bracket",
            "engine": {"model": "deepseek-r1-0528-qwen3-8b", "flags": {"max-model-len": 4096}},
            "hardware": {"gpu": "h200", "count": 1},
            "search_space": {"parameters": space},
            "workload": {**workload, "tokenizer": str(tokenizer)},
            "objective": objective,
        }
    )


def test_the_night_is_costed_with_the_search_as_a_launch_runs_it(tiny_model_dir: Path) -> None:
    """The simulated baseline's search starts at the bracket around the simulator's own
    capacity for it (what the prediction before a launch gives), and every run counts."""
    spec = _capacity_spec(tiny_model_dir, max_runs=5, max_repeats=0)
    ctx = TrialContext(spec.name, 0, {"max-num-seqs": 256}, phase=lambda _: None)
    plain = length_only_runner(spec).measure(ctx)  # from the study's rate, no prediction
    assert plain.capacity is not None and plain.capacity.capacity_rps > 0
    forecast = SkipPrediction(metrics={CAPACITY_RPS: plain.capacity.capacity_rps})
    bracket = capacity_bracket(spec, objective_of(spec), forecast)
    assert bracket is not None
    costed = simulated_baseline(spec)
    assert costed.rate_steps[0].rate_rps == pytest.approx(bracket[1])
    assert costed.rate_steps[0].rate_rps != plain.rate_steps[0].rate_rps
    runs = sum(s.runs for s in costed.rate_steps)
    assert costed.capacity is not None and runs == costed.capacity.runs
    assert costed.engine_s == pytest.approx(
        float(costed.startup_s or 0) + float(costed.workload_s or 0)
    )
    # a scenario mix, or no capacity predicted: no bracket, the search from the study's rate
    # before the reference is measured the prediction is the simulator's as it is (`raw`)
    uncalibrated = capacity_bracket(
        spec, objective_of(spec), SkipPrediction(raw={CAPACITY_RPS: 4.0})
    )
    # the table's throughput band for this workload (Poisson arrivals: benchmarks/sim_bands.py)
    band = PUBLISHED_BANDS["poisson"]["throughput"]
    assert uncalibrated == pytest.approx(predicted_bracket(4.0, band, 0.05))
    assert capacity_bracket(spec, objective_of(spec), None) is None
    started = _capacity_spec(tiny_model_dir, start_rps=3.0)  # the study's own start wins
    assert (
        capacity_bracket(started, objective_of(started), SkipPrediction(raw={CAPACITY_RPS: 4.0}))
        is None
    )
    assert (
        capacity_bracket(spec, objective_of(spec), SkipPrediction(metrics={CAPACITY_RPS: 0.0}))
        is None
    )


def test_the_estimate_moves_down_only_when_its_own_rate_breaks():
    def measure(rate: float, repeat: int, whole: bool = False) -> Step:
        return _runs(rate, *[0.4] * (repeat + 1))  # every repeat breaks

    steps = [_runs(5.0, -0.5), _runs(8.0, -0.02), _runs(9.0, 0.3)]
    assert confirm(measure, steps, 8.0, 1) == 8.0  # 5 broke pooled: the interval's doubt
    assert not steps[0].feasible and steps[0].runs == 2
    own = [_runs(8.0, -0.5), _runs(6.0, -0.3), _runs(9.0, 0.3)]
    assert confirm(measure, own, 8.0, 1) == 6.0  # the capacity's own rate broke: down
