"""Capacity mode's search from a predicted capacity (issue 47): the bracket around it, the
stop once the interval is within the resolution, and the cost the night is planned with."""

from __future__ import annotations

import math

import pytest
from test_capacity import queue_curve
from test_capacity_interval import noisy_curve

from tuner.measure.capacity import (
    BREAKS,
    HOLDS,
    Step,
    confirm,
    predicted_bracket,
    rate_verdict,
    search,
)
from tuner.spec.slo import parse_slo

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
    assert calls[0] == pytest.approx(bracket[0])
    if got.steps[0].feasible:  # the rate predicted to hold held: next, the one to break
        assert calls[1] == pytest.approx(bracket[1])
    assert got.resolved and knee / 1.05 <= got.capacity_rps <= knee * (1 + 1e-9)
    old_measure, old_calls = queue_curve(knee)
    old = search(old_measure, 1.0, SLOS, resolution=0.05, max_runs=8)
    assert old.capacity_rps == pytest.approx(got.capacity_rps, rel=0.05)
    assert len(calls) < len(old_calls)


def test_a_bracket_is_ignored_when_the_search_starts_at_the_best_so_far():
    measure, calls = queue_curve(10.0)
    search(measure, 1.0, SLOS, beat_rps=12.0, bracket=(8.0, 11.0))
    assert calls == [12.0]  # broke at the best capacity so far: stopped there


def _runs(rate: float, *verdicts: str) -> Step:
    return Step(rate, {}, BREAKS not in verdicts, None, rate_verdict(verdicts), len(verdicts),
                {}, verdicts)  # fmt: skip


def test_the_repeats_stop_once_the_interval_is_within_the_resolution():
    calls: list[tuple[float, int]] = []

    def measure(rate: float, repeat: int) -> Step:
        calls.append((rate, repeat))
        return _runs(rate, *([HOLDS] if rate < 10.2 else [BREAKS]) * (repeat + 1))

    settled = [_runs(10.0, HOLDS, HOLDS), _runs(10.4, BREAKS, BREAKS)]  # 4 % apart
    assert confirm(measure, list(settled), 10.0, 4, resolution=0.05) == 10.0
    assert calls == []
    wide = [_runs(10.0, HOLDS, HOLDS), _runs(10.4, BREAKS)]  # the break not sure yet
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
