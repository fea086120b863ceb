"""Capacity mode's lines and JSON in `tuner export`, worded as `best`, `trials` and the report.

A capacity found at `capacity.max_rps` is a lower bound (docs/objective.md, "Capacity mode"): it
reads "≥ 5 req/s (the highest rate allowed)", never "capacity 5 req/s", and never "run cap
reached". The words themselves are `tuner.trial.words` (the live line of `tuner run` uses them
too).
"""

from __future__ import annotations

from tuner.spec.figures import figure
from tuner.trial import CapacityResult, TrialPoint
from tuner.trial.words import GOODPUT_NOTE, capacity_rate, goodput, rate

NO_HIGHER = (
    ", no higher rate was tried (capacity.max_rps, or the most the workload's num_prompts "
    "can show within its TTFT/E2EL limit: docs/objective.md)"
)


def capacity_lines(p: TrialPoint, baseline: TrialPoint | None) -> list[str]:
    """Capacity mode: the capacity measured for this config, the rate it was measured at (the
    highest offered rate that met every SLO), the next rate up that broke one, the goodput;
    per scenario when the study has several."""

    def one(found: CapacityResult, label: str, base: CapacityResult | None) -> str:
        cap = found.capacity_rps
        if cap <= 0 and found.capacity_rps_high is not None:
            return (
                f"  {label}capacity = {capacity_rate(found)}: no rate tried met every SLO, "
                f"{figure(found.capacity_rps_high)} req/s broke one"
            )
        if cap <= 0:
            return f"  {label}capacity = 0 req/s: no rate tried met every SLO"
        above = found.above_rps
        bound = f", {figure(above)} req/s broke one" if above else " (the highest rate tried)"
        good = found.goodput_rps
        good_text = f"; {goodput(good)}" if good is not None else ""
        exact = "" if found.resolved else " (run cap reached before the resolution)"
        if found.capped:  # met every SLO at max_rps: no higher rate was tried
            bound, exact = NO_HIGHER, ""
        base_text = ""
        if base is not None and baseline is not None and baseline is not p:
            base_rate = capacity_rate(base)
            base_text = f"; baseline trial {baseline.number}: {base_rate}"
        return (
            f"  {label}capacity = {capacity_rate(found)} within the SLOs: "
            f"measured at an offered rate of {figure(cap)} req/s"
            f"{bound}{good_text}{exact}{base_text}"
        )

    theirs = baseline.searches() if baseline is not None else {}
    out = [
        one(c, f"{name}: " if name else "", theirs.get(name)) for name, c in p.searches().items()
    ]
    if p.scenario_names and p.capacity_rps is not None:
        mix = rate(p.capacity_rps, p.capacity_capped)
        out.append(f"  capacity over the scenarios = {mix}")
    return out


def capacity_json(p: TrialPoint) -> dict[str, object] | None:
    """Capacity mode: the capacity (a lower bound when capped), with goodput explained."""
    if p.capacity_rps is None:
        return None
    found, bounds = p.record.capacity, p.capacity_interval
    return {
        "capacity_rps": p.capacity_rps,
        "lower_bound": p.capacity_capped,
        "capacity_rps_low": bounds[0] if bounds is not None else None,
        "capacity_rps_high": bounds[1] if bounds is not None else None,
        "text": rate(p.capacity_rps, p.capacity_capped, bounds),
        "goodput_rps": found.goodput_rps if found is not None else None,
        "goodput_means": GOODPUT_NOTE.strip("()"),
        "scenarios": {name: c.encode() for name, c in p.searches().items() if name},
    }
