"""A trial's figures in words (pure): one wording for `tuner run`'s live line, `best`, `export`,
`trials` and the report.

Capacity mode leads with the capacity; a capacity found at `capacity.max_rps` is a lower bound
(docs/objective.md, "Capacity mode"): it reads "≥ 5 req/s (the highest rate allowed)", never
"capacity 5 req/s". A scenario mix shows each scenario's own score and figures, never the pooled
figures alone (pooled over scenarios they can contradict the score, which is aggregated from the
scenarios' own).
"""

from __future__ import annotations

from collections.abc import Mapping

from tuner.measure.runs import CapacityResult
from tuner.spec.figures import figure
from tuner.spec.metric_keys import headline_words
from tuner.trial.payloads import metrics_of
from tuner.trial.record import TrialRecord

CAPPED_NOTE = "(the highest rate allowed)"
# the capacity's interval (`interval`) where a table shows it without words around it
INTERVAL_NOTE = (
    "capacity (a-b): a, the highest rate that held every SLO for sure (0: none did); b, the "
    'lowest above it that broke one for sure (?: none did) (docs/objective.md, "Capacity mode")'
)
GOODPUT_NOTE = "(requests per second served within the latency limits)"


def rate(rps: float, is_capped: bool, bounds: tuple[float, float | None] | None = None) -> str:
    """`5 req/s`, `7.8 req/s (6.9-9.5)` with the capacity's interval (`bounds`: the
    highest rate that held the SLOs for sure, the lowest that broke one for sure; `?`: none
    broke one for sure), `below 3.2 req/s (0-3.2)` when no rate met them but one broke them
    (a config that lost the race against the incumbent, docs/objective.md, "The race"), or
    `≥ 5 req/s (the highest rate allowed)`."""
    if is_capped:
        return f"≥ {figure(rps)} req/s {CAPPED_NOTE}"
    if rps <= 0 and bounds is not None and bounds[1] is not None:
        return f"below {figure(bounds[1])} req/s{interval(bounds)}"  # e.g. a race lost there
    return f"{figure(rps)} req/s{interval(bounds)}"


def interval(bounds: tuple[float, float | None] | None) -> str:
    """` (6.9-9.5)`, a capacity's interval in req/s; "" when none is stored."""
    if bounds is None:
        return ""
    low, high = bounds
    return f" ({figure(low)}-{'?' if high is None else figure(high)})"


def capacity_rate(found: CapacityResult) -> str:
    """One search's capacity in words, with its interval (`rate`)."""
    return rate(found.capacity_rps, found.capped, found.interval)


def goodput(rps: float) -> str:
    """`goodput 4.8 req/s (requests per second served within the latency limits)`."""
    return f"goodput {figure(rps)} req/s {GOODPUT_NOTE}"


def score_words(score: float | None) -> str:
    return f"score {figure(score, 3, sign=True) or 'nan'}"  # +0.000, never -0.000


def figures(
    metrics: Mapping[str, float],
    found: CapacityResult | None,
    sep: str = "  ",
    *,
    partial: bool = False,
) -> str:
    """One workload's headline in words: its capacity first (capacity mode), then the headline
    metrics (of the run at that rate); `partial`: a stopped trial's, each figure marked `~`."""
    words = headline_words(dict(metrics), partial=partial)
    if found is None:
        return sep.join(words)
    return f"capacity {capacity_rate(found)}{sep}{at_rate(found)}: " + sep.join(words)


def at_rate(found: CapacityResult) -> str:
    """Which run a capacity trial's own figures come from."""
    return "at that rate" if found.capacity_rps > 0 else "at the lowest rate tried"


def scenario_parts(record: TrialRecord) -> list[str]:
    """Each scenario of a mix in words: `chat: score −0.052, p99 TTFT 812.0 ms, ...`."""
    return [
        f"{name}: {score_words(e.score)}, {figures(metrics_of(e.metrics), e.capacity, ', ')}"
        for name, e in record.scenarios.items()
    ]


def trial_line(record: TrialRecord, metrics: Mapping[str, float]) -> str:
    """A measured trial in one line: the score and the headline figures; in capacity mode the
    capacity first; in a scenario mix each scenario's score and figures, not the pooled ones."""
    score = score_words(record.score)
    if record.scenarios:
        return f"{score} over the scenarios  " + " | ".join(scenario_parts(record))
    found = record.searches().get("")
    if found is not None:
        if not record.stopped_figures or record.partial:
            return f"{figures(metrics, found)}  ({score})"
        # its only figures are a stopped run's, the SLO already broken for sure: mark them so
        words = "  ".join(headline_words(dict(metrics), partial=True))
        return (
            f"capacity {capacity_rate(found)}  at the lowest rate tried, stopped early "
            f"(an SLO broken for sure; figures of the requests done): {words}  ({score})"
        )
    return f"{score}  {figures(metrics, None)}"
