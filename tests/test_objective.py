"""Objective arithmetic, constraints and the noise check."""

from __future__ import annotations

import math

import pytest

from tuner.measure.modes import MODES, CapacityObjective, Objective
from tuner.measure.objective import (
    PENALTY_SCORE,
    clearly_better,
    constraints,
    score,
)
from tuner.spec.study import ObjectiveSpec


def objective_of(spec: ObjectiveSpec) -> Objective:
    """One workload's objective object (`tuner.measure.modes.objective_of` without a study)."""
    return MODES[spec.mode](spec)


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
    multi = objective_of(ObjectiveSpec(mode="multi"))
    assert multi.values(BASE, BASE) == [1000.0, 50.0, 400.0]
    assert multi.penalty_values() is None  # nothing measured yet
    worse = {"p99_ttft_ms": 3000.0, "mean_tpot_ms": 40.0, "output_throughput": 100.0}
    assert multi.penalty_values([BASE, worse]) == [3000.0, 50.0, 100.0]
    assert objective_of(ObjectiveSpec()).penalty_values() == [PENALTY_SCORE]


def test_one_object_per_mode() -> None:
    """Every mode the study file accepts has its object, and each answers for its mode."""
    modes = ObjectiveSpec.model_fields["mode"].annotation.__args__  # type: ignore[union-attr]
    assert set(MODES) == set(modes)
    scalar = objective_of(ObjectiveSpec(weights={"p99_ttft_ms": 2.0, "mean_tpot_ms": 1.0}))
    assert scalar.directions() == ["minimize"] and scalar.names() == ["score"]
    assert scalar.values({**BASE, "p99_ttft_ms": 500.0}, BASE) == [pytest.approx(-2 * math.log(2))]
    assert scalar.score_scale() == 3.0 and scalar.score_floor() == 2.0
    assert scalar.resolution() is None and scalar.noise_log() == 0.0
    assert scalar.stated_metrics() == ["p99_ttft_ms", "mean_tpot_ms", "output_throughput"]
    multi = objective_of(ObjectiveSpec(mode="multi", objectives=["p99_ttft_ms", "mean_e2el_ms"]))
    assert multi.directions() == ["minimize", "minimize"] and not multi.prunes_against_incumbent
    assert multi.stated_metrics()[-1] == "mean_e2el_ms"
    cap = objective_of(ObjectiveSpec(mode="capacity", slo=["p99_ttft_ms<=800"]))
    assert isinstance(cap, CapacityObjective) and cap.has_capacity and not scalar.has_capacity
    assert cap.directions() == ["maximize"] and cap.names() == ["capacity_rps"]
    assert cap.penalty_values() == [0.0] and cap.stated_metrics() == ["capacity_rps"]
    assert cap.resolution() == 0.05 and cap.noise_log() == pytest.approx(math.log1p(0.05))
    assert cap.gain_words(None, 6.0, 3.0) == "capacity 3 → 6 req/s"
    assert scalar.gain_words(-0.25, None, None) == "score -0.250 against the defaults' 0"
    assert scalar.rate_words(2.5) == "2.5 req/s" and scalar.rate_words(math.inf) == "all at once"
    assert cap.rate_words(2.5) == "rate searched for the capacity"
    assert scalar.run_label(2.5) is None and cap.run_label(2.5) == "at 2.5 req/s"


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
