"""The trial schema: classification, the one ranking, and what the readers see."""

from __future__ import annotations

import pytest
from results_fixtures import frozen

from tuner.trial import (
    FailureKind,
    baseline_of,
    best,
    configs,
    confirmation_runs,
    is_metric,
    ranked,
    read,
    read_all,
)


def test_read_classifies_feasible_infeasible_failed() -> None:
    ok = read(frozen(0, score=0.0, baseline=True, p99_ttft_ms=10.0, note="x"))
    assert ok.status == "feasible" and ok.baseline and ok.metrics == {"p99_ttft_ms": 10.0}
    slo = read(frozen(1, constraints={"slo": 0.5}, score=-1.0, p99_ttft_ms=3.0))
    assert slo.status == "infeasible" and slo.failure is None
    kv = read(
        frozen(
            2, constraints={"measured": 1.0}, failure_kind="kv_cache", failure_reason="too small"
        )
    )
    assert kv.status == "failed" and kv.failure == "kv_cache: too small"
    legacy = frozen(5, score=1.0)
    legacy.system_attrs = {"constraints": [0.0, 0.25]}  # the list optuna-dashboard reads
    assert read(legacy).status == "infeasible"
    assert read(legacy).constraints == {"0": 0.0, "1": 0.25}
    crashed = read(frozen(3, state="FAIL"))
    assert crashed.status == "failed" and "interrupted" in (crashed.failure or "")
    assert read(frozen(4, state="RUNNING")).status == "running"


def test_is_metric() -> None:
    assert is_metric("p99.9_e2el_ms") and is_metric("output_throughput")
    assert not is_metric("score") and not is_metric("vllm_version")


def test_failure_kinds_are_the_stored_strings() -> None:
    assert FailureKind.INTERRUPTED == "interrupted"
    p = read(frozen(0, failure_kind=FailureKind.INTERRUPTED.value, state="FAIL"))
    assert p.interrupted and p.status == "failed"


def test_ranked_is_feasible_best_first_and_ties_go_to_the_earlier() -> None:
    points = read_all(
        [
            frozen(0, score=0.0, baseline=True, p99_ttft_ms=10.0),
            frozen(1, score=-0.5, p99_ttft_ms=9.0),
            frozen(2, score=-0.5, p99_ttft_ms=9.0),
            frozen(3, score=-2.0, constraints={"p99_ttft_ms<=5": 0.8}, p99_ttft_ms=9.0),
            frozen(4, score=-3.0, constraints={"measured": 1.0}, failure_kind="crashed"),
            frozen(5, state="RUNNING"),
        ]
    )
    assert [p.number for p in ranked(points)] == [1, 2, 0]
    assert best(points).number == 1
    assert baseline_of(points).number == 0
    assert best([]) is None


def test_confirmed_configs_rank_by_their_mean_and_reruns_are_not_candidates() -> None:
    points = read_all(
        [
            frozen(0, score=0.0, baseline=True, p99_ttft_ms=10.0),
            frozen(1, score=-0.6, p99_ttft_ms=9.0),
            frozen(2, score=-0.4, p99_ttft_ms=9.0),
            frozen(3, score=0.5, confirm_of=1, p99_ttft_ms=9.0),
            frozen(4, score=0.4, confirm_of=1, p99_ttft_ms=9.0),
            frozen(5, score=-9.0, confirm_of=2, constraints={"measured": 1.0}),
        ]
    )
    # every re-run counts, the one that broke a constraint too (issue 24 item 2)
    assert confirmation_runs(points) == {1: [-0.6, 0.5, 0.4], 2: [-0.4, -9.0]}
    # 1's mean is +0.1; 2's re-run broke a constraint: 2 is no candidate, whatever it scored
    assert [p.number for p in ranked(points)] == [0, 1]


def test_each_config_once_its_reruns_pooled_and_reused_copies_left_out() -> None:
    points = read_all(
        [
            frozen(0, score=0.0, baseline=True, p99_ttft_ms=10.0, failed=0.0),
            frozen(1, score=-0.3, p99_ttft_ms=8.0, failed=0.0),
            frozen(2, score=-0.3, reused_from=1, p99_ttft_ms=8.0, failed=0.0),  # a copy
            frozen(3, score=-0.1, confirm_of=1, p99_ttft_ms=4.0, failed=0.0),
            frozen(4, score=0.1, confirm_of=2, p99_ttft_ms=16.0, failed=2.0),  # re-ran the copy
            frozen(5, score=-0.5, p99_ttft_ms=7.0),
            frozen(6, score=0.4, confirm_of=5, constraints={"slo": 0.2}, p99_ttft_ms=20.0),
        ]
    )
    found = configs(points)
    assert [(c.point.number, c.runs, c.reused) for c in found] == [
        (0, (0,), ()),
        (1, (1, 3, 4), (2,)),
        (5, (5, 6), ()),
    ]
    one = found[1].point
    # the mean score `ranked` ranks by, and the figures (geometric mean) that score it
    assert one.score == pytest.approx(sum(confirmation_runs(points)[1]) / 3) == -0.1
    assert one.metrics["p99_ttft_ms"] == pytest.approx(8.0)  # (8 × 4 × 16) ** (1/3)
    assert one.metrics["failed"] == pytest.approx(2 / 3)  # a zero among them: the plain mean
    assert one.feasible and not found[2].point.feasible  # 5's re-run broke the SLO
    # a reused copy is no candidate of its own: it would rank on its origin's first run alone
    assert [p.number for p in ranked(points)] == [1, 0]


def test_broken_constraints_and_cis() -> None:
    p = read(frozen(0, constraints={"p99_ttft_ms<=5": 0.5, "measured": 0.0}, p99_ttft_ms=7.5))
    assert p.broken_constraints == ["p99_ttft_ms<=5"]
    q = read(frozen(1, score=0.0, p99_ttft_ms=7.5, p99_ttft_ms_ci=[7.0, 8.0]))
    assert q.ci("p99_ttft_ms") == (7.0, 8.0) and q.ci("mean_tpot_ms") is None
    assert q.measured and not read(frozen(2, score=0.0, reused_from=1)).measured


@pytest.mark.parametrize("state", ["COMPLETE", "FAIL", "PRUNED", "RUNNING"])
def test_every_state_has_a_status(state: str) -> None:
    assert read(frozen(0, state=state)).status in (
        "feasible",
        "infeasible",
        "failed",
        "pruned",
        "running",
    )
