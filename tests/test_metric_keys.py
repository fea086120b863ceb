"""The metric-key grammar: every key the metrics produce parses back, directions, SLOs."""

from __future__ import annotations

import pytest

from tuner.errors import UserError
from tuner.measure.metrics import compute_metrics
from tuner.measure.records import RequestRecord
from tuner.spec.metric_keys import (
    LatencyKey,
    direction,
    latency_key,
    parse_latency_key,
    percentile_key,
)
from tuner.spec.slo import metric_direction, parse_slo


def test_build_and_parse_round_trip() -> None:
    assert latency_key("mean", "ttft") == "mean_ttft_ms"
    assert percentile_key(99, "tpot") == "p99_tpot_ms"
    assert percentile_key(99.9, "e2el") == "p99.9_e2el_ms"
    assert parse_latency_key("p99.9_e2el_ms") == LatencyKey("p99.9", "e2el", 99.9)
    assert parse_latency_key("median_itl_ms") == LatencyKey("median", "itl", None)
    assert parse_latency_key("median_itl_ms").key == "median_itl_ms"  # type: ignore[union-attr]
    for bad in ("output_throughput", "p_ttft_ms", "mean_ttft", "max_ttft_ms", "mean_foo_ms"):
        assert parse_latency_key(bad) is None


def test_every_computed_key_has_a_direction() -> None:
    recs = [RequestRecord(3, True, 4, 0.1, [0.01] * 3, 0.2, 0.0)]
    m = compute_metrics(
        recs,
        1.0,
        selected_metrics=["ttft", "tpot", "itl", "e2el"],
        percentiles=[50, 99.9],
        goodput_ms={"ttft": 500},
    )
    latency = [k for k in m if parse_latency_key(k)]
    assert len(latency) == 4 * 5
    assert direction("output_throughput") == direction("request_goodput") == "maximize"
    assert direction("p99.9_tpot_ms") == direction("failed") == "minimize"
    assert direction("total_output_tokens") is None


@pytest.mark.parametrize("name", ["p99_foo_ms", "throughput", "mean_ttft"])
def test_unknown_metric_is_a_user_error(name: str) -> None:
    with pytest.raises(UserError, match="unknown metric"):
        metric_direction(name)
    with pytest.raises(UserError, match="unknown metric"):
        parse_slo(f"{name}<=1")


def test_slo_uses_the_grammar() -> None:
    (limit,) = parse_slo("p99.9_ttft_ms<=2000")
    assert limit.metric == "p99.9_ttft_ms" and limit.met({"p99.9_ttft_ms": 10.0})
