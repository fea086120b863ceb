"""The grammar of metric keys, written once (pure, no I/O, no numpy).

vLLM's result keys (vllm/benchmarks/serve.py; docs/metrics.md):

- latencies: `{statistic}_{metric}_ms`, statistic `mean`, `median`, `std` or `p<N>`
  (`p99`, `p99.9`), metric `ttft`, `tpot`, `itl` or `e2el`: lower is better;
- throughputs: `request_throughput`, `output_throughput`, `total_token_throughput`, and
  `request_goodput` and `completed`: higher is better;
- `failed` and `duration`: lower is better.

And one figure of the engine's own (its `/metrics` counters, not `vllm bench serve`'s result):
`prefix_cache_hit_rate`, the share of the measured run's prompt tokens found in vLLM's prefix
cache (0..1; higher is better), present only where the engine exports the counters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from tuner.spec.figures import figure, partial_figure

Direction = Literal["minimize", "maximize"]

LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
GoodputMetric = Literal["ttft", "tpot", "e2el"]  # what a goodput limit may be set on
GOODPUT_METRICS: tuple[GoodputMetric, ...] = ("ttft", "tpot", "e2el")
STATISTICS = ("mean", "median", "std")  # and p<N>
THROUGHPUTS = ("request_throughput", "output_throughput", "total_token_throughput")
PREFIX_CACHE_HIT_RATE = "prefix_cache_hit_rate"
MAXIMIZED = (*THROUGHPUTS, "request_goodput", "completed", PREFIX_CACHE_HIT_RATE)
MINIMIZED = ("failed", "duration")
COUNTS = ("completed", "failed")  # requests counted, exactly: no noise in them

# The headline figures, defined once: the default objective (weights and Pareto objectives),
# what the simulator is calibrated to, and what every table, report and progress line shows
# first (latencies first: HEADLINE_LATENCIES are the latency-against-load curves).
HEADLINE_METRICS = ("p99_ttft_ms", "mean_tpot_ms", "output_throughput")
HEADLINE_LATENCIES = HEADLINE_METRICS[:2]
# In words, for one line of text: (label, unit, decimal places) per headline metric.
_HEADLINE_WORDS = {
    "p99_ttft_ms": ("p99 TTFT", " ms", 1),
    "mean_tpot_ms": ("mean TPOT", " ms", 2),
    "output_throughput": ("output", " tok/s", 1),
}

_LATENCY_KEY = re.compile(r"^(mean|median|std|p(\d+(?:\.\d+)?))_(ttft|tpot|itl|e2el)_ms$")


@dataclass(frozen=True, slots=True)
class LatencyKey:
    """One parsed `{statistic}_{metric}_ms` key. `statistic` is as written (`mean`,
    `p99.9`); `percentile` is its number for a `p<N>` statistic, else None."""

    statistic: str
    metric: str
    percentile: float | None = None

    @property
    def key(self) -> str:
        return f"{self.statistic}_{self.metric}_ms"


def percentile_word(p: float) -> str:
    """`99` -> "99", `99.9` -> "99.9": how vLLM names the `p<N>_..._ms` keys."""
    return str(int(p)) if int(p) == p else str(p)


def latency_key(statistic: str, metric: str) -> str:
    """`("mean", "ttft")` -> "mean_ttft_ms"; a statistic may also be a percentile number."""
    return f"{statistic}_{metric}_ms"


def percentile_key(p: float, metric: str) -> str:
    """`(99.9, "tpot")` -> "p99.9_tpot_ms"."""
    return latency_key(f"p{percentile_word(p)}", metric)


def parse_latency_key(key: str) -> LatencyKey | None:
    """The parts of a latency key, or None when `key` is not one."""
    m = _LATENCY_KEY.match(key)
    if m is None:
        return None
    statistic, pct, metric = m.groups()
    return LatencyKey(statistic, metric, float(pct) if pct else None)


def is_throughput(key: str) -> bool:
    return key in THROUGHPUTS


def headline_words(metrics: dict[str, float], *, partial: bool = False) -> list[str]:
    """The headline figures in words ("p99 TTFT 812.0 ms", ...; nan where one is missing);
    `partial`: a stopped trial's, each marked ("p99 TTFT ~812.0 ms", `partial_figure`)."""
    out = []
    for key in HEADLINE_METRICS:
        label, unit, places = _HEADLINE_WORDS[key]
        text = partial_figure(figure(metrics.get(key), places), partial) or "nan"
        out.append(f"{label} {text}{unit}")
    return out


_OTHER_WORDS = {
    "request_throughput": ("request throughput", " req/s"),
    "total_token_throughput": ("total throughput", " tok/s"),
    "request_goodput": ("goodput", " req/s"),
    "capacity_rps": ("capacity", " req/s"),
    "duration": ("duration", " s"),
}


def metric_words(key: str) -> tuple[str, str]:
    """A metric's label and unit for a line of text: `("mean TPOT", " ms")`,
    `("output", " tok/s")`, `("p95 E2EL", " ms")`; an unknown key is its own label."""
    if key in _HEADLINE_WORDS:
        label, unit, _ = _HEADLINE_WORDS[key]
        return label, unit
    parsed = parse_latency_key(key)
    if parsed is not None:
        return f"{parsed.statistic} {parsed.metric.upper()}", " ms"
    return _OTHER_WORDS.get(key, (key, ""))


def direction(key: str) -> Direction | None:
    """Whether a metric is better low or high; None for a name that is not a metric key."""
    if key in MAXIMIZED:
        return "maximize"
    if key in MINIMIZED or parse_latency_key(key) is not None:
        return "minimize"
    return None


EXAMPLE_PERCENTILES = ("p50", "p90", "p95", "p99", "p99.9")
# Every metric name in words, for an unknown metric's error
METRICS_WORDS = "{mean,median,std,pNN}_{ttft,tpot,itl,e2el}_ms (e.g. p99_ttft_ms), " + ", ".join(
    (*MAXIMIZED, *MINIMIZED)
)


def example_metrics() -> list[str]:
    """The metric names a study file most often means (for "did you mean")."""
    stats = (*STATISTICS, *EXAMPLE_PERCENTILES)
    return [latency_key(s, m) for s in stats for m in LATENCY_METRICS] + [*MAXIMIZED, *MINIMIZED]


# Metrics that are not latencies: (words, unit)
_NAMED = {
    "output_throughput": ("output", "tok/s"),
    "total_token_throughput": ("total", "tok/s"),
    "request_throughput": ("requests", "req/s"),
    "request_goodput": ("goodput", "req/s"),
    "capacity_rps": ("capacity", "req/s"),
    "completed": ("completed", ""),
    "failed": ("failed", ""),
    "duration": ("duration", "s"),
    "engine_s": ("engine", "s"),
    "startup_s": ("start-up", "s"),
    "workload_s": ("workload", "s"),
    "saved_engine_s": ("saved", "s"),
    "score": ("score", ""),
}


def metric_label(key: str) -> str:
    """A metric key in words with its unit: `p99_ttft_ms` -> "P99 TTFT (ms)",
    `output_throughput` -> "output (tok/s)"; a key it does not know, as written."""
    latency = parse_latency_key(key)
    if latency is not None:
        stat = latency.statistic.upper() if latency.percentile is not None else latency.statistic
        return f"{stat} {latency.metric.upper()} (ms)"
    if key in _NAMED:
        words, unit = _NAMED[key]
        return f"{words} ({unit})" if unit else words
    return key


def goodput_metric(name: str) -> GoodputMetric | None:
    """`name` as a metric a goodput limit may be set on (`ttft`, `tpot`, `e2el`), else None."""
    return next((m for m in GOODPUT_METRICS if m == name), None)
