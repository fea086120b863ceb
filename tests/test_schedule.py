"""Arrival times: rate, burstiness, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tuner.workload.schedule import arrival_times


def test_infinite_rate_sends_everything_at_once():
    assert np.array_equal(arrival_times(5, math.inf, 1.0, seed=0), np.zeros(5))


def test_mean_rate_is_the_asked_rate():
    t = arrival_times(1000, 8.0, 1.0, seed=3)
    assert np.all(np.diff(t) >= 0) and t[0] > 0
    assert t[-1] == pytest.approx(1000 / 8.0)  # vLLM rescales so the last lands at n/rate
    assert np.mean(np.diff(t)) == pytest.approx(1 / 8.0, rel=0.01)


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_burstiness_sets_gap_dispersion(burstiness):
    # Gamma gaps with shape k have coefficient of variation 1/sqrt(k).
    gaps = np.diff(arrival_times(20000, 5.0, burstiness, seed=0))
    cv = np.std(gaps) / np.mean(gaps)
    assert cv == pytest.approx(1 / math.sqrt(burstiness), rel=0.05)


def test_poisson_gaps_are_exponential():
    gaps = np.diff(arrival_times(20000, 2.0, 1.0, seed=1))
    # For an exponential distribution, P(gap > mean) = 1/e.
    assert np.mean(gaps > np.mean(gaps)) == pytest.approx(math.exp(-1), abs=0.01)


def test_infinite_burstiness_is_uniform():
    t = arrival_times(4, 2.0, math.inf, seed=0)
    assert np.allclose(t, [0.5, 1.0, 1.5, 2.0])


def test_same_seed_same_times_other_seed_differs():
    a = arrival_times(50, 3.0, 0.5, seed=7)
    assert np.array_equal(a, arrival_times(50, 3.0, 0.5, seed=7))
    assert not np.array_equal(a, arrival_times(50, 3.0, 0.5, seed=8))


def test_matches_vllm_draws():
    # vLLM seeds numpy's global legacy generator with --seed and draws one gamma per request.
    rng = np.random.RandomState(11)
    gaps = [rng.gamma(shape=2.0, scale=1 / (4.0 * 2.0)) for _ in range(10)]
    expected = np.cumsum(gaps) * (10 / 4.0) / np.sum(gaps)
    assert np.allclose(arrival_times(10, 4.0, 2.0, seed=11), expected)


def test_rejects_bad_rate_and_burstiness():
    with pytest.raises(ValueError):
        arrival_times(3, 0.0, 1.0, seed=0)
    with pytest.raises(ValueError):
        arrival_times(3, 1.0, 0.0, seed=0)
    assert arrival_times(0, 1.0, 1.0, seed=0).size == 0
