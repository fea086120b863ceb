"""A seeded run of a synthetic latency-load curve, as the capacity search sees one: its P99
TTFT with a request-bootstrap-like interval of ± 5 % (narrower than the spread between seeds,
as on the simulated engine), its own verdict and excess, pooled with the runs before it at
that rate; the rate's verdict is the search's to give (`rate_verdicts.judged`)."""

from __future__ import annotations

from tuner.measure.capacity import UNSURE, Step, meets, run_excess, step_verdict
from tuner.spec.slo import SloLimit

Runs = dict[float, list[tuple[str, tuple[float, bool]]]]


def seeded_step(
    rate: float,
    repeat: int,
    metrics: dict[str, float],
    said: Runs,
    slos: list[SloLimit],
) -> Step:
    """The step at `rate` after its `repeat`-th run, whose figures are `metrics` (`said`: the
    runs so far, by rate)."""
    p99 = metrics["p99_ttft_ms"]
    ci = {"p99_ttft_ms": (0.95 * p99, 1.05 * p99)}
    own = (step_verdict(metrics, ci, slos), run_excess(metrics, slos))
    runs = said[rate] = [*said.get(rate, [])[:repeat], own]
    return Step(rate, metrics, meets(metrics, slos), None, UNSURE, len(runs), ci,
                tuple(v for v, _ in runs), tuple(e for _, (e, _) in runs),
                tuple(w for _, (_, w) in runs))  # fmt: skip
