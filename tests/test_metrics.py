"""Metric arithmetic on hand-made records, checked against numbers worked out by hand."""

from __future__ import annotations

import pytest

from tuner.measure.metrics import bootstrap_ci, compute_metrics, percentile_word
from tuner.measure.records import RequestRecord


def _rec(prompt_len, out, ttft, itl, start=0.0, success=True):
    latency = ttft + sum(itl)
    return RequestRecord(
        prompt_len=prompt_len,
        success=success,
        output_tokens=out,
        ttft_s=ttft,
        itl_s=list(itl),
        latency_s=latency,
        start_s=start,
    )


# Request A: TTFT 0.1 s, 4 tokens in 4 chunks, gaps 0.02 0.02 0.05 -> E2EL 0.19,
#            TPOT (0.19-0.1)/3 = 0.03.
# Request B: TTFT 0.3 s, 3 tokens in 2 chunks (one chunk carried 2 tokens), gap 0.1 ->
#            E2EL 0.4, TPOT (0.4-0.3)/2 = 0.05; one ITL entry, per chunk.
# Request C: 1 token: TTFT 0.2 = E2EL, no TPOT.
# Request D: failed; counts only in `failed`.
RECORDS = [
    _rec(10, 4, 0.1, [0.02, 0.02, 0.05], start=0.0),
    _rec(20, 3, 0.3, [0.1], start=0.5),
    _rec(30, 1, 0.2, [], start=1.2),
    RequestRecord(prompt_len=40, success=False, error="HTTP 500"),
]


def test_counts_tokens_and_throughputs():
    m = compute_metrics(RECORDS, 2.0, selected_metrics=["ttft"], percentiles=[99])
    assert m["completed"] == 3 and m["failed"] == 1
    assert m["total_input_tokens"] == 60  # the failed request's prompt does not count
    assert m["total_output_tokens"] == 8
    assert m["duration"] == 2.0
    assert m["request_throughput"] == pytest.approx(1.5)
    assert m["output_throughput"] == pytest.approx(4.0)
    assert m["total_token_throughput"] == pytest.approx(34.0)
    assert "request_goodput" not in m


def test_latency_statistics_in_ms():
    m = compute_metrics(
        RECORDS, 2.0, selected_metrics=["ttft", "tpot", "itl", "e2el"], percentiles=[50, 99.9]
    )
    assert m["mean_ttft_ms"] == pytest.approx(200.0)
    assert m["median_ttft_ms"] == pytest.approx(200.0)
    assert m["std_ttft_ms"] == pytest.approx(81.6496580927726)  # population std, as numpy
    assert m["p50_ttft_ms"] == pytest.approx(200.0)
    # linear interpolation: 0.2 + 0.999 * (0.3 - 0.2) * ... over 3 points: rank 1.998
    assert m["p99.9_ttft_ms"] == pytest.approx(299.8)
    assert m["mean_tpot_ms"] == pytest.approx(40.0)  # C has no TPOT
    assert m["median_tpot_ms"] == pytest.approx(40.0)
    # ITL pools every gap of every request: [20, 20, 50, 100]
    assert m["mean_itl_ms"] == pytest.approx(47.5)
    assert m["median_itl_ms"] == pytest.approx(35.0)
    assert m["mean_e2el_ms"] == pytest.approx((190 + 400 + 200) / 3)


def test_only_selected_metrics_and_asked_percentiles():
    m = compute_metrics(RECORDS, 1.0, selected_metrics=["tpot"], percentiles=[95, 99])
    assert {k for k in m if k.endswith("_ms")} == {
        "mean_tpot_ms",
        "median_tpot_ms",
        "std_tpot_ms",
        "p95_tpot_ms",
        "p99_tpot_ms",
    }


def test_no_success_gives_zeros_like_vllm():
    failed = [RequestRecord(prompt_len=5, error="x")]
    m = compute_metrics(failed, 1.0, selected_metrics=["ttft", "itl"], percentiles=[99])
    assert m["completed"] == 0 and m["failed"] == 1
    assert m["mean_ttft_ms"] == 0.0 and m["p99_itl_ms"] == 0.0
    assert m["max_output_tokens_per_s"] == 0.0


def test_goodput_all_limits_must_hold():
    # ttft <= 250 ms keeps A and C; tpot <= 40 ms keeps A and C (C's TPOT counts as 0).
    m = compute_metrics(
        RECORDS, 2.0, selected_metrics=[], percentiles=[], goodput_ms={"ttft": 250, "tpot": 40}
    )
    assert m["request_goodput"] == pytest.approx(1.0)
    m = compute_metrics(RECORDS, 2.0, selected_metrics=[], percentiles=[], goodput_ms={"e2el": 195})
    assert m["request_goodput"] == pytest.approx(0.5)  # A (190 ms) only
    m = compute_metrics(RECORDS, 2.0, selected_metrics=[], percentiles=[], goodput_ms={"ttft": 100})
    assert m["request_goodput"] == pytest.approx(0.5)  # the limit is inclusive


def test_peak_tokens_and_concurrency_in_one_second_buckets():
    m = compute_metrics(RECORDS, 2.0, selected_metrics=[], percentiles=[])
    # Token times: A at 0.1..0.19 (4), B at 0.8, 0.9 (2), C at 1.4 (1) -> bucket 0 has 6.
    assert m["max_output_tokens_per_s"] == 6.0
    # A spans second 0, B spans 0, C spans 1 -> at most 2 in one bucket.
    assert m["max_concurrent_requests"] == 2


def test_percentile_word():
    assert percentile_word(99.0) == "99" and percentile_word(99.9) == "99.9"


def _many(n=200):
    out = [8 + i % 5 for i in range(n)]
    return [
        _rec(
            100, out[i], 0.05 + 0.001 * (i % 50), [0.01 + 0.0001 * (i % 7)] * (out[i] - 1), 0.01 * i
        )
        for i in range(n)
    ]


@pytest.mark.parametrize(
    "key", ["p99_ttft_ms", "mean_tpot_ms", "output_throughput", "mean_itl_ms", "median_e2el_ms"]
)
def test_bootstrap_interval_contains_point_estimate(key):
    recs = _many()
    point = compute_metrics(
        recs, 3.0, selected_metrics=["ttft", "tpot", "itl", "e2el"], percentiles=[99]
    )[key]
    lo, hi = bootstrap_ci(recs, 3.0, key, n_resamples=300, seed=1)
    assert lo <= point <= hi
    assert lo < hi
    assert bootstrap_ci(recs, 3.0, key, n_resamples=300, seed=1) == (lo, hi)  # deterministic


def test_bootstrap_narrows_with_more_requests():
    small = bootstrap_ci(_many(50), 1.0, "mean_ttft_ms", seed=0)
    large = bootstrap_ci(_many(2000), 1.0, "mean_ttft_ms", seed=0)
    assert (large[1] - large[0]) < (small[1] - small[0]) / 3


def test_bootstrap_identical_requests_gives_point_interval():
    recs = [_rec(10, 5, 0.1, [0.02] * 4) for _ in range(30)]
    lo, hi = bootstrap_ci(recs, 1.0, "mean_tpot_ms")
    assert lo == pytest.approx(20.0) and hi == pytest.approx(20.0)


def test_bootstrap_throughput_reflects_slow_requests():
    # Same tokens everywhere, but E2EL varies: the interval must not collapse to a point.
    recs = [_rec(10, 5, 0.1, [0.02 * (1 + i % 4)] * 4) for i in range(100)]
    point = compute_metrics(recs, 2.0, selected_metrics=[], percentiles=[])["output_throughput"]
    lo, hi = bootstrap_ci(recs, 2.0, "output_throughput")
    assert lo < point < hi
    assert (hi - lo) / point < 0.2


def test_bootstrap_rejects_unknown_key():
    with pytest.raises(ValueError):
        bootstrap_ci(RECORDS, 1.0, "nonsense")


def test_the_bootstraps_statistics_of_all_resamples_at_once_are_those_row_by_row():
    """The vectorised percentiles (failed requests and 1-token outputs are NaNs, left out)
    give exactly the figures of one numpy call per resample."""
    import numpy as np

    from tuner.measure.metrics import _row_statistics, _statistic

    rng = np.random.default_rng(1)
    for case in range(40):
        n = int(rng.integers(1, 40))
        values = rng.exponential(100.0, n)
        if case % 2:
            values[rng.random(n) < 0.3] = np.nan
        table = values[rng.integers(0, n, (50, n))]
        for stat, pct in (("p", 99.0), ("p", 50.0), ("p", 0.0), ("median", None), ("std", None)):
            by_row = [_statistic(stat, pct, row[~np.isnan(row)]) for row in table]
            assert np.array_equal(_row_statistics(stat, pct, table), by_row), (case, stat, pct)


def test_the_pooled_itl_quantiles_of_all_resamples_are_numpys_of_each_pooled_resample():
    """Median ITL's interval (issue 34) ranks the pooled gaps by the resample's counts instead
    of pooling each resample: the same figures as one numpy call per pooled resample, for
    ties, empty requests and every percentile."""
    import numpy as np

    from tuner.measure.metrics import _pooled_quantile_samples, _statistic

    rng = np.random.default_rng(3)
    for case in range(24):
        n = int(rng.integers(1, 30))
        digits = 1 if case % 3 == 0 else 8  # ties
        gaps = [rng.exponential(40.0, int(rng.integers(0, 12))).round(digits) for _ in range(n)]
        idx = rng.integers(0, n, (30, n))
        for stat, pct in (("median", None), ("p", 99.0), ("p", 0.0), ("p", 100.0)):
            by_row = [_statistic(stat, pct, np.concatenate([gaps[i] for i in row])) for row in idx]
            assert np.array_equal(_pooled_quantile_samples(gaps, idx, stat, pct), by_row), case


def test_median_itl_carries_an_interval_like_the_headline_metrics():
    from tuner.measure.metrics import confidence_intervals

    recs = [
        _rec(100, 9, 0.05, [0.01 + 0.001 * ((i * 7 + j) % 13) for j in range(8)]) for i in range(60)
    ]
    metrics = compute_metrics(recs, 3.0, selected_metrics=["itl"], percentiles=[99])
    cis = confidence_intervals(recs, 3.0, metrics)
    lo, hi = cis["median_itl_ms"]
    assert lo <= metrics["median_itl_ms"] <= hi and lo < hi
    assert "p99_itl_ms" not in cis  # the other pooled percentiles: still none
