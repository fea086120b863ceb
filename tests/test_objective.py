"""Objective arithmetic, constraints and the noise check."""

from __future__ import annotations

import math

import pytest

from tuner.measure.objective import (
    PENALTY_SCORE,
    clearly_better,
    constraints,
    objective_values,
    penalty_values,
    score,
)
from tuner.spec.study import ObjectiveSpec

W = {"p99_ttft_ms": 1.0, "mean_tpot_ms": 1.0, "output_throughput": 1.0}
BASE = {"p99_ttft_ms": 1000.0, "mean_tpot_ms": 50.0, "output_throughput": 400.0}


def test_baseline_scores_zero() -> None:
    assert score(BASE, BASE, W) == 0.0


def test_worked_example_from_docs() -> None:
    # docs/objective.md: TTFT halves, TPOT +10 %, throughput +25 %.
    trial = {"p99_ttft_ms": 500.0, "mean_tpot_ms": 55.0, "output_throughput": 500.0}
    expected = math.log(0.5) + math.log(1.1) - math.log(1.25)
    assert score(trial, BASE, W) == pytest.approx(expected)
    assert score(trial, BASE, W) == pytest.approx(-0.8210, abs=1e-4)


def test_weights_and_directions() -> None:
    faster = {**BASE, "output_throughput": 800.0}
    assert score(faster, BASE, W) == pytest.approx(-math.log(2))
    assert score(faster, BASE, {"output_throughput": 2.0}) == pytest.approx(-2 * math.log(2))
    slower_ttft = {**BASE, "p99_ttft_ms": 2000.0}
    assert score(slower_ttft, BASE, {"p99_ttft_ms": 1.0, "mean_tpot_ms": 0.0}) > 0


def test_multi_objective_values_and_penalties() -> None:
    spec = ObjectiveSpec(mode="multi")
    assert objective_values(spec, BASE, BASE) == [1000.0, 50.0, 400.0]
    assert penalty_values(spec) is None  # nothing measured yet
    worse = {"p99_ttft_ms": 3000.0, "mean_tpot_ms": 40.0, "output_throughput": 100.0}
    assert penalty_values(spec, [BASE, worse]) == [3000.0, 50.0, 100.0]
    assert penalty_values(ObjectiveSpec()) == [PENALTY_SCORE]


def test_constraints() -> None:
    spec = ObjectiveSpec(slo=["p99_ttft_ms<=800"], max_failed_fraction=0.1)
    c = constraints(spec, BASE, failed_fraction=0.0)
    assert c["measured"] == 0.0 and c["failed_requests"] < 0
    assert c["p99_ttft_ms<=800"] == pytest.approx(0.25)
    ok = constraints(spec, {**BASE, "p99_ttft_ms": 700.0})
    assert ok["p99_ttft_ms<=800"] == 0.0
    assert constraints(spec, BASE, failed_fraction=0.5)["failed_requests"] > 0
    missing = constraints(spec, None)
    assert missing["measured"] > 0 and missing["p99_ttft_ms<=800"] > 0


def test_clearly_better_is_the_interval_of_the_difference() -> None:
    a = {"p99_ttft_ms": (100.0, 120.0)}
    assert clearly_better(a, {"p99_ttft_ms": (130.0, 150.0)}, W)
    # 110 against 130: the difference's interval, 20 ± hypot(10, 20), includes 0
    assert not clearly_better(a, {"p99_ttft_ms": (110.0, 150.0)}, W)
    # overlapping intervals, a clear difference: 86 against 100, 14 > hypot(6, 10) = 11.7
    tpot = {"mean_tpot_ms": (80.0, 92.0)}
    assert clearly_better(tpot, {"mean_tpot_ms": (90.0, 110.0)}, W)
    # the estimates decide which side of each interval counts: 91 sits at the top of its own
    assert not clearly_better(tpot, {"mean_tpot_ms": (90.0, 110.0)}, W, {"mean_tpot_ms": 91.0})
    thr = {"output_throughput": (500.0, 600.0)}
    assert clearly_better(thr, {"output_throughput": (300.0, 400.0)}, W)
    assert not clearly_better(thr, {"output_throughput": (300.0, 400.0)}, {"output_throughput": 0})
