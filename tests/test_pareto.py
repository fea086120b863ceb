"""Pareto front: exactly the non-dominated set, with ties, directions and unusable points."""

from __future__ import annotations

import itertools
import random

import pytest
from results_fixtures import frozen

from tuner.errors import UserError
from tuner.results.pareto import (
    check_stored,
    front_of,
    noise_front,
    off_front_words,
    pareto_front,
    parse_objectives,
)
from tuner.trial import read as trial_point

MIN2 = [("p99_ttft_ms", "minimize"), ("mean_tpot_ms", "minimize")]


def pts(*pairs: tuple[float, float]) -> list[dict[str, float]]:
    return [{"p99_ttft_ms": a, "mean_tpot_ms": b} for a, b in pairs]


def test_hand_built_front_both_minimised() -> None:
    points = pts((100, 50), (200, 40), (150, 45), (300, 30), (250, 45), (100, 60), (400, 30))
    # (250,45) is dominated by (150,45); (100,60) by (100,50); (400,30) by (300,30).
    assert pareto_front(points, MIN2) == [0, 1, 2, 3]


def test_equal_points_are_all_on_the_front() -> None:
    points = pts((100, 50), (100, 50), (200, 40), (200, 40), (200, 41))
    assert pareto_front(points, MIN2) == [0, 1, 2, 3]


def test_tie_on_one_objective_better_on_other_dominates() -> None:
    assert pareto_front(pts((100, 50), (100, 49)), MIN2) == [1]


def test_throughput_is_maximised() -> None:
    objectives = parse_objectives("p99_ttft_ms,output_throughput")
    assert objectives == [("p99_ttft_ms", "minimize"), ("output_throughput", "maximize")]
    points = [
        {"p99_ttft_ms": 100, "output_throughput": 500},
        {"p99_ttft_ms": 100, "output_throughput": 900},  # dominates the first
        {"p99_ttft_ms": 80, "output_throughput": 300},
        {"p99_ttft_ms": 120, "output_throughput": 800},  # dominated by the second
    ]
    assert pareto_front(points, objectives) == [1, 2]


def test_points_without_the_metric_are_left_out() -> None:
    points = [{"p99_ttft_ms": 1.0}, {"p99_ttft_ms": 5.0, "mean_tpot_ms": 9.0}]
    points.append({"p99_ttft_ms": float("nan"), "mean_tpot_ms": 1.0})
    assert pareto_front(points, MIN2) == [1]
    assert pareto_front([], MIN2) == []


def _dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True)) and a != b


@pytest.mark.parametrize("seed", range(20))
def test_matches_definition_on_random_points_with_many_ties(seed: int) -> None:
    rng = random.Random(seed)
    n, k = rng.randint(1, 40), rng.randint(1, 3)
    names = ["p99_ttft_ms", "mean_tpot_ms", "output_throughput"][:k]
    objectives = [(m, "maximize" if m == "output_throughput" else "minimize") for m in names]
    points = [{m: float(rng.randint(0, 4)) for m in names} for _ in range(n)]
    cost = [tuple(p[m] * (-1 if d == "maximize" else 1) for m, d in objectives) for p in points]
    expected = [
        i for i in range(n) if not any(_dominates(cost[j], cost[i]) for j in range(n) if j != i)
    ]
    got = pareto_front(points, objectives)
    assert got == expected
    # Every point off the front is dominated by one on it; no two front points dominate.
    for i, j in itertools.permutations(got, 2):
        assert not _dominates(cost[i], cost[j])


def test_parse_objectives_rejects_unknown_empty_and_repeated() -> None:
    with pytest.raises(UserError, match="unknown metric 'p99_tft_ms'"):
        parse_objectives("p99_tft_ms,mean_tpot_ms")
    with pytest.raises(UserError, match="no objectives"):
        parse_objectives(" , ")
    with pytest.raises(UserError, match="twice"):
        parse_objectives("mean_tpot_ms,mean_tpot_ms")


def test_front_of_keeps_only_feasible_and_sorts_by_first_objective() -> None:
    trials = [
        frozen(0, p99_ttft_ms=300.0, mean_tpot_ms=30.0),
        frozen(1, p99_ttft_ms=100.0, mean_tpot_ms=50.0),
        # Infeasible and failed trials would dominate everything if they were counted.
        frozen(2, constraints={"slo": 1.0}, p99_ttft_ms=1.0, mean_tpot_ms=1.0),
        frozen(3, failure_kind="oom", p99_ttft_ms=1.0, mean_tpot_ms=1.0),
        frozen(4, p99_ttft_ms=200.0, mean_tpot_ms=60.0),
    ]
    front = front_of([trial_point(t) for t in trials], MIN2)
    assert [p.number for p in front] == [1, 0]


def test_check_stored_names_what_is_there() -> None:
    points = [trial_point(frozen(0, p99_ttft_ms=1.0, mean_tpot_ms=2.0))]
    check_stored(points, ["p99_ttft_ms"], "s")
    with pytest.raises(UserError, match=r"'p95_ttft_ms' is not stored in study 's'.*mean_tpot_ms"):
        check_stored(points, ["p95_ttft_ms"], "s")


def _ci_point(n: int, ttft: float, tpot: float, half: float = 5.0, **attrs: object):  # type: ignore[no-untyped-def]
    """A feasible trial with symmetric 95 % intervals of ± `half` on both axes."""
    return trial_point(
        frozen(
            n,
            p99_ttft_ms=ttft,
            mean_tpot_ms=tpot,
            p99_ttft_ms_ci=[ttft - half, ttft + half],
            mean_tpot_ms_ci=[tpot - half, tpot + half],
            **attrs,
        )
    )


def test_configs_within_each_others_intervals_are_one_group() -> None:
    # a trade-off on the figures (1 faster to first token, 0 faster per token), but each
    # gap (2 ms) is well inside the intervals (±5 ms): one group, 1 within noise of 0
    a, b = _ci_point(0, 100.0, 52.0), _ci_point(1, 102.0, 50.0)
    front = noise_front([a, b], MIN2)
    assert [p.number for p in front.points] == [0, 1]
    assert front.groups == 1
    assert front.within_noise_of(a) is None and front.within_noise_of(b) == 0
    # the same 2 % and 4 % gaps with tight intervals (±0.5 ms): still one group, as no gain
    # under 5 % is called clear, however narrow the intervals (`objective.MIN_CLEAR_GAIN`)
    a, b = _ci_point(0, 100.0, 52.0, 0.5), _ci_point(1, 102.0, 50.0, 0.5)
    assert noise_front([a, b], MIN2).groups == 1
    # gaps of 10 % with tight intervals: two trade-offs, no group
    a, b = _ci_point(0, 100.0, 55.0, 0.5), _ci_point(1, 110.0, 50.0, 0.5)
    front = noise_front([a, b], MIN2)
    assert front.groups == 2 and front.within_noise_of(b) is None


def test_a_config_clearly_better_on_both_axes_drops_the_other() -> None:
    best, worse = _ci_point(0, 100.0, 50.0), _ci_point(1, 140.0, 90.0)
    front = noise_front([worse, best], MIN2)
    assert [p.number for p in front.points] == [0]
    assert front.near == () and front.groups == 1
    words = off_front_words(worse, front)
    assert words is not None and "trial 0" in words
    assert "clearly better on p99 TTFT, mean TPOT" in words
    # dominated only within noise: off the front, but counted as near it
    close = _ci_point(2, 101.0, 51.0)
    front = noise_front([best, close], MIN2)
    assert [p.number for p in front.points] == [0] and [p.number for p in front.near] == [2]
    assert "(within noise)" in (off_front_words(close, front) or "")
    assert off_front_words(best, front) is None


def test_without_stored_intervals_nothing_is_called_noise() -> None:
    # the noise is unknown, not small: two trade-offs, never one group
    a = trial_point(frozen(0, p99_ttft_ms=100.0, mean_tpot_ms=52.0))
    b = trial_point(frozen(1, p99_ttft_ms=102.0, mean_tpot_ms=50.0))
    assert noise_front([a, b], MIN2).groups == 2


def test_a_scenarios_front_reads_that_scenarios_intervals() -> None:
    from tuner.trial import for_scenario

    doc = {"weight": 1.0, "metrics": {"p99_ttft_ms": 3000.0}, "ci": {"p99_ttft_ms": [2900, 3100]}}
    point = trial_point(
        frozen(0, p99_ttft_ms=100.0, p99_ttft_ms_ci=[90, 110], scenarios={"doc": doc})
    )
    assert point.ci("p99_ttft_ms") == (90, 110)
    (seen,) = for_scenario([point], "doc")
    assert seen.metrics["p99_ttft_ms"] == 3000 and seen.ci("p99_ttft_ms") == (2900, 3100)
