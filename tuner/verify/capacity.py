"""Verify in capacity mode (pure): the workload a capacity study's promise is checked with, and
the words of its verdict. Its promise is that the shipped config meets the SLOs at its
capacity rate; verify sends the study's workload at that rate and judges it against the
trial's stored figures, which are its run at that rate
(`tuner.runners.load_runs.search_capacity`). What it says, and why it never searches the
engine's capacity anew: "Capacity studies" in docs/verify.md.
"""

from __future__ import annotations

from dataclasses import replace

from tuner.errors import UserError
from tuner.measure.modes import Objective
from tuner.runners.load_runs import goodput_limits
from tuner.spec.figures import figure
from tuner.spec.parts import Measuring
from tuner.spec.workload import WorkloadSpec
from tuner.trial import TrialPoint
from tuner.verify.compare import Verdict


def verified_workload(spec: Measuring, objective: Objective, point: TrialPoint) -> WorkloadSpec:
    """The workload verify sends before its caps: the study's; in capacity mode at the shipped
    trial's capacity rate, with the goodput limits its search measured under. A shipped
    config that met the SLOs at no rate has no capacity to verify (a UserError)."""
    w = spec.workload
    rate = objective.stated_rate(point.capacity_rps or 0.0)
    if rate is None:
        return w  # the study's own rate
    if not rate:
        raise UserError(
            f"trial {point.number} met the SLOs at no rate: a capacity study that found no "
            "capacity has nothing to verify"
        )
    if w.goodput is None:
        w = w.model_copy(update={"goodput": goodput_limits(spec.slo_limits()) or None})
    return w.model_copy(update={"request_rate": rate})


_HEADS = ("holds", "breaks the SLO", "slower than measured")


def at_capacity(found: Verdict, sent_rps: float, capacity_rps: float, capped: bool) -> Verdict:
    """The verdict with the rate it was judged at: "holds at the study's capacity, 4.2 req/s";
    below the capacity (`--max-rate`) it says the capacity itself was not checked."""
    head = next((h for h in _HEADS if found.text.startswith(h)), None)
    if head is None:  # no verdict: nothing was judged at any rate
        return found
    least = "at least " if capped else ""
    if sent_rps >= capacity_rps:
        where = f" at the study's capacity, {least}{figure(capacity_rps)} req/s"
    else:
        where = (
            f" at {figure(sent_rps)} req/s (--max-rate), below the study's capacity of {least}"
            f"{figure(capacity_rps)} req/s, which it does not check"
        )
    return replace(found, text=head + where + found.text[len(head) :])
