"""The metrics of `vllm bench serve`, computed from per-request records (pure numpy).

Definitions and key names follow vllm/benchmarks/serve.py (`calculate_metrics` and the
result dict); docs/metrics.md states them. Times in records are seconds, results in ms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from tuner.measure.records import RequestRecord
from tuner.spec.metric_keys import (
    GOODPUT_METRICS,
    HEADLINE_METRICS,
    LATENCY_METRICS,
    GoodputMetric,
    is_throughput,
    latency_key,
    parse_latency_key,
    percentile_key,
    percentile_word,
)

if TYPE_CHECKING:
    from tuner.spec.workload import WorkloadSpec

__all__ = [
    "CI_METRICS",
    "GOODPUT_METRICS",
    "LATENCY_METRICS",
    "bootstrap_ci",
    "compute_metrics",
    "confidence_intervals",
    "percentile_word",
    "run_metrics",
]
# The metrics each result carries a bootstrap confidence interval for. Median ITL is there
# because a TPOT gain can hide it growing 6x (docs/results.md, "Everything that got worse").
CI_METRICS = (
    *HEADLINE_METRICS,
    "mean_ttft_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "request_throughput",
)


def _stats(values: Sequence[float], name: str, percentiles: Sequence[float]) -> dict[str, float]:
    # vLLM uses `values or 0`: an empty list gives 0 for every statistic.
    arr = np.asarray(values if len(values) else [0.0], dtype=float) * 1000.0
    out = {
        latency_key("mean", name): float(np.mean(arr)),
        latency_key("median", name): float(np.median(arr)),
        latency_key("std", name): float(np.std(arr)),
    }
    for p in percentiles:
        out[percentile_key(p, name)] = float(np.percentile(arr, p))
    return out


def _tpot_s(rec: RequestRecord) -> float | None:
    """(E2EL - TTFT) / (output_tokens - 1); undefined for one output token or fewer."""
    if rec.output_tokens > 1:
        return (rec.latency_s - rec.ttft_s) / (rec.output_tokens - 1)
    return None


def _peaks(ok: list[RequestRecord]) -> tuple[float, int]:
    """vLLM's peak output tokens/s and peak concurrent requests, in 1-second buckets."""
    if not ok:
        return 0.0, 0
    t0 = min(r.start_s for r in ok)
    t_end = max(r.start_s + r.latency_s for r in ok)
    n_buckets = int(np.ceil(t_end - t0)) + 1
    tokens = np.zeros(n_buckets)
    concurrent = np.zeros(n_buckets)
    for r in ok:
        times = r.start_s + r.ttft_s + np.concatenate(([0.0], np.cumsum(r.itl_s)))
        buckets = (times - t0).astype(int)
        buckets = buckets[(buckets >= 0) & (buckets < n_buckets)]
        np.add.at(tokens, buckets, 1)
        first = int(r.start_s - t0)
        last = int(r.start_s + r.latency_s - t0)
        concurrent[first : last + 1] += 1
    return float(tokens.max()), int(concurrent.max())


def compute_metrics(
    records: list[RequestRecord],
    duration_s: float,
    *,
    selected_metrics: list[str],
    percentiles: list[float],
    goodput_ms: Mapping[GoodputMetric, float] | None = None,
) -> dict[str, float]:
    """vLLM's result keys for one run.

    Throughputs divide by `duration_s` (first dispatch to last completion). Only successful
    requests count toward tokens and latencies. `request_goodput` is present only when
    `goodput_ms` limits are given: a request is good when it meets every limit, a request
    with one output token or fewer counting TPOT as 0 (as vLLM does).
    """
    ok = [r for r in records if r.success]
    ttfts = [r.ttft_s for r in ok]
    e2els = [r.latency_s for r in ok]
    tpots_all = [_tpot_s(r) for r in ok]
    tpots = [t for t in tpots_all if t is not None]
    itls = [gap for r in ok for gap in r.itl_s]
    total_input = sum(r.prompt_len for r in ok)
    total_output = sum(r.output_tokens for r in ok)
    peak_tokens_s, peak_concurrent = _peaks(ok)

    result: dict[str, float] = {
        "duration": duration_s,
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": len(ok) / duration_s,
        "output_throughput": total_output / duration_s,
        "total_token_throughput": (total_input + total_output) / duration_s,
        "max_output_tokens_per_s": peak_tokens_s,
        "max_concurrent_requests": peak_concurrent,
    }
    if goodput_ms:
        per_request = {"ttft": ttfts, "tpot": [t or 0.0 for t in tpots_all], "e2el": e2els}
        limits_s = [
            (per_request[m], goodput_ms[m] / 1000.0) for m in GOODPUT_METRICS if m in goodput_ms
        ]
        good = sum(all(values[i] <= limit for values, limit in limits_s) for i in range(len(ok)))
        result["request_goodput"] = good / duration_s
    values = {"ttft": ttfts, "tpot": tpots, "itl": itls, "e2el": e2els}
    for name in LATENCY_METRICS:  # vLLM's order, whatever the order asked
        if name in selected_metrics:
            result.update(_stats(values[name], name, percentiles))
    return result


def run_metrics(
    records: list[RequestRecord], duration_s: float, w: WorkloadSpec
) -> dict[str, float]:
    """vLLM bench's metrics of one run's `records` over `duration_s`, as workload `w` asks
    for them (its selected metrics, percentiles and goodput limits)."""
    return compute_metrics(
        records,
        duration_s,
        selected_metrics=w.selected_metrics,
        percentiles=w.percentiles,
        goodput_ms=w.goodput,
    )


# ---- bootstrap confidence intervals -------------------------------------------------------


def _statistic(stat: str, pct: float | None, arr: np.ndarray) -> float:
    if arr.size == 0:
        return 0.0
    if stat == "mean":
        return float(arr.mean())
    if stat == "median":
        return float(np.median(arr))
    if stat == "std":
        return float(arr.std())
    assert pct is not None  # what is left is a percentile
    return float(np.percentile(arr, pct))


def bootstrap_ci(
    records: Sequence[RequestRecord],
    duration_s: float,
    key: str,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile-bootstrap interval of one metric, resampling requests with replacement.

    Supports the throughputs and every `{stat}_{metric}_ms` key. ITL resamples whole
    requests, keeping each request's gaps together. A throughput is written as
    (tokens per request-second of E2EL) x (mean requests in flight); the first factor is
    resampled, the second held at the run's value, so slow requests drawn more often lower
    it. Deterministic for a given seed. With no request the interval is (0, 0).
    """
    parsed = parse_latency_key(key)
    if not is_throughput(key) and parsed is None:
        raise ValueError(f"no bootstrap for metric {key!r}")
    rng = np.random.default_rng(seed)
    n = len(records)
    if n == 0:
        return (0.0, 0.0)
    idx = rng.integers(0, n, size=(n_resamples, n))
    if parsed is None:
        samples = _throughput_samples(records, idx, key, duration_s)
    else:
        pct = parsed.percentile
        stat = "p" if pct is not None else parsed.statistic
        samples = _latency_samples(records, idx, stat, pct, parsed.metric)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(samples, [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


def _throughput_samples(
    records: Sequence[RequestRecord], idx: np.ndarray, key: str, duration_s: float
) -> np.ndarray:
    success = np.array([r.success for r in records], dtype=float)
    out_tok = np.array([r.output_tokens for r in records], dtype=float) * success
    in_tok = np.array([r.prompt_len for r in records], dtype=float) * success
    per_request = {
        "request_throughput": success,
        "output_throughput": out_tok,
        "total_token_throughput": out_tok + in_tok,
    }[key]
    e2el = np.array([r.latency_s for r in records], dtype=float) * success
    sums: np.ndarray = per_request[idx].sum(axis=1)
    if e2el.sum() <= 0:  # nothing timed: hold the duration fixed
        return sums / duration_s
    # duration_b = duration * (sum of resampled E2EL / sum of E2EL): concurrency held fixed.
    resampled_e2el = np.maximum(e2el[idx].sum(axis=1), 1e-12)
    return np.asarray(sums * e2el.sum() / (duration_s * resampled_e2el))


def _latency_samples(
    records: Sequence[RequestRecord], idx: np.ndarray, stat: str, pct: float | None, metric: str
) -> np.ndarray:
    if metric == "itl":
        gaps = [np.asarray(r.itl_s if r.success else [], dtype=float) * 1000.0 for r in records]
        if stat == "mean":  # vectorised: pooled mean = sum of sums / sum of counts
            sums = np.array([g.sum() for g in gaps])
            counts = np.array([g.size for g in gaps], dtype=float)
            total = counts[idx].sum(axis=1)
            return np.where(total > 0, sums[idx].sum(axis=1) / np.maximum(total, 1), 0.0)
        if stat in ("median", "p"):
            return _pooled_quantile_samples(gaps, idx, stat, pct)
        return np.array(
            [_statistic(stat, pct, np.concatenate([gaps[i] for i in row])) for row in idx]
        )
    values = np.full(len(records), math.nan)
    for i, r in enumerate(records):
        if not r.success:
            continue
        if metric == "ttft":
            values[i] = r.ttft_s
        elif metric == "e2el":
            values[i] = r.latency_s
        else:
            tpot = _tpot_s(r)
            values[i] = math.nan if tpot is None else tpot
    values *= 1000.0
    valid = ~np.isnan(values)
    if stat == "mean":
        filled = np.where(valid, values, 0.0)
        counts = valid[idx].sum(axis=1)
        return np.where(counts > 0, filled[idx].sum(axis=1) / np.maximum(counts, 1), 0.0)
    return _row_statistics(stat, pct, values[idx])


def _pooled_quantile_samples(
    gaps: Sequence[np.ndarray], idx: np.ndarray, stat: str, pct: float | None
) -> np.ndarray:
    """The median (or percentile) of each resample's pooled gaps, without pooling them.

    A resample draws request i `counts[i]` times, so its pooled gaps are the run's gaps in
    sorted order, each repeated as often as its request was drawn: the gap at rank k is the
    first whose running sum of those counts exceeds k. Concatenating and sorting every
    resample instead took 8-17 s per metric at 1000 requests x 256 tokens. The running sums
    are taken over a window of ranks around the quantile (the counts below it summed by one
    product), and over all ranks only for the rare resample whose quantile falls outside it.
    The figures are numpy's: the mean of the two middle gaps for a median, numpy's linear
    interpolation for a percentile (a test checks both against one numpy call per resample).
    """
    n_req = len(gaps)
    sizes = np.array([g.size for g in gaps], dtype=np.int64)
    if sizes.sum() == 0:
        return np.zeros(idx.shape[0])
    pooled = np.concatenate(list(gaps))
    order = np.argsort(pooled, kind="stable")
    ordered, owner = pooled[order], np.repeat(np.arange(n_req), sizes)[order]
    n_rows = idx.shape[0]
    offsets = idx + np.arange(n_rows)[:, None] * n_req
    counts = np.bincount(offsets.ravel(), minlength=n_rows * n_req).reshape(n_rows, n_req)
    total = counts @ sizes
    if stat == "median":
        q = 0.5
    else:
        assert pct is not None  # a percentile names its pct
        q = float(pct) / 100.0
    if stat == "median":
        below, above = (total - 1) // 2, total // 2
        t = np.where(below == above, 0.0, 0.5)
    else:
        at = np.maximum(total - 1, 0) * q
        below = np.floor(at).astype(np.int64)
        above = np.minimum(below + 1, np.maximum(total - 1, 0))
        t = at - below
    a = _ranked(ordered, owner, counts, below)
    b = _ranked(ordered, owner, counts, above)
    if stat == "median":
        mid = np.where(below == above, a, (a + b) / 2.0)
    else:
        mid = np.where(t >= 0.5, b - (b - a) * (1 - t), a + (b - a) * t)  # numpy's _lerp
    return np.where(total > 0, mid, 0.0)


def _ranked(
    ordered: np.ndarray, owner: np.ndarray, counts: np.ndarray, rank: np.ndarray
) -> np.ndarray:
    """Per resample (a row of `counts`), the gap at `rank` of its pooled, sorted gaps.

    The sorted gaps are cut into blocks; `below[j, i]` counts request i's gaps before block j,
    so a resample's count of pooled gaps before block j is one dot product. A bisection over
    the blocks finds the block holding the rank, and a running sum inside it the gap.
    """
    n_rows, n_req = counts.shape
    n_gaps = ordered.size
    n_blocks = max(1, min(n_gaps, 1_000_000 // max(n_req, 1), 1024))  # `below`: <= 8 MB
    size = -(-n_gaps // n_blocks)
    starts = np.arange(0, n_gaps, size)
    block = np.arange(n_gaps) // size
    each = np.bincount(block * n_req + owner, minlength=starts.size * n_req)
    below = np.zeros((starts.size + 1, n_req), dtype=np.int64)
    below[1:] = np.cumsum(each.reshape(starts.size, n_req), axis=0)
    lo, hi = np.zeros(n_rows, dtype=np.int64), np.full(n_rows, starts.size, dtype=np.int64)
    while np.any(hi - lo > 1):  # the last block whose start has no more than `rank` before it
        mid = (lo + hi) // 2
        ahead = (counts * below[mid]).sum(axis=1) <= rank
        lo, hi = np.where(ahead, mid, lo), np.where(ahead, hi, mid)
    base = (counts * below[lo]).sum(axis=1)
    at = np.minimum(starts[lo][:, None] + np.arange(size), n_gaps - 1)
    inside = (starts[lo][:, None] + np.arange(size)) < n_gaps
    weights = np.where(inside, np.take_along_axis(counts, owner[at], axis=1), 0)
    running = base[:, None] + np.cumsum(weights, axis=1)
    pos = starts[lo] + (running <= rank[:, None]).sum(axis=1)
    return np.asarray(ordered[np.minimum(pos, n_gaps - 1)])


def _row_statistics(stat: str, pct: float | None, table: np.ndarray) -> np.ndarray:
    """`_statistic` of every row of `table` at once, its NaNs left out (a row of NaNs only: 0).

    Without NaNs, numpy's own call along the rows (the same figures as row by row); with
    them, rows sorted (NaNs last) and numpy's linear interpolation at each row's own count.
    """
    nan = np.isnan(table)
    if stat in ("median", "std"):
        if not nan.any():
            rows: np.ndarray = np.median(table, axis=1) if stat == "median" else table.std(axis=1)
            return rows
        # not a headline statistic: row by row
        return np.array(
            [_statistic(stat, pct, row[~gone]) for row, gone in zip(table, nan, strict=True)]
        )
    assert pct is not None  # what is left is a percentile
    if not nan.any():
        return np.asarray(np.percentile(table, pct, axis=1))
    counts = (~nan).sum(axis=1)
    ordered = np.sort(table, axis=1)  # NaNs sort last
    at = np.maximum(counts - 1, 0) * (pct / 100.0)
    below = np.floor(at).astype(int)
    above = np.minimum(below + 1, np.maximum(counts - 1, 0))
    a = np.take_along_axis(ordered, below[:, None], axis=1)[:, 0]
    b = np.take_along_axis(ordered, above[:, None], axis=1)[:, 0]
    t = at - below
    lerp = np.where(t >= 0.5, b - (b - a) * (1 - t), a + (b - a) * t)  # numpy's _lerp
    return np.where(counts > 0, lerp, 0.0)


def confidence_intervals(
    records: Sequence[RequestRecord],
    duration_s: float,
    metrics: Mapping[str, float],
    *,
    seed: int = 0,
    keys: Sequence[str] = CI_METRICS,
) -> dict[str, tuple[float, float]]:
    """Bootstrap 95% intervals for the `keys` (default `CI_METRICS`) that `metrics` holds and
    the bootstrap supports (throughputs, latency statistics; capacity mode asks for the SLOs')."""
    return {
        key: bootstrap_ci(records, duration_s, key, seed=seed)
        for key in dict.fromkeys(keys)
        if key in metrics and (is_throughput(key) or parse_latency_key(key) is not None)
    }
