"""A study file whose judging alone changed (objective weights, SLOs): re-score, not re-measure.

A judging change keeps the measurement id (`tuner.trial.specs`), and every read scores the
stored trials anew under today's judging (`tuner.trial.scoring.rejudge`). What a run adds
(docs/reliability.md, "Re-judging"): one line saying so, and the trials that early stopping
ended under the previous judging queued again when the new one would not have stopped them at
once (their partial figures meet every new SLO). A re-queued trial carries `retry_of` (the trial
it measures again) and the judging that queued it (`judging_id`); it runs before new trials,
within the budget, and early stopping may stop it again under the new rules. Put the judging
back before it runs and it is not taken (it stays WAITING, `stale_queue`: `tuner trials` says
so); the judging that queued it, again, takes it.
"""

from __future__ import annotations

from collections.abc import Callable

from tuner.spec.study import StudySpec
from tuner.spec.values import Params
from tuner.trial import AttrsHolder, TrialPoint, TrialRecord, baseline_of, params_key, specs


def bind(study: AttrsHolder, spec: StudySpec, accept_changes: bool) -> tuple[str, list[str]]:
    """`tuner.trial.specs.bind`, and what it changed in the judging of the study's current
    measurement ([]: nothing, or a new measurement)."""
    change = specs.judging_change(study, spec)
    return specs.bind(study, spec, accept_changes=accept_changes), change


def requeue(
    read: Callable[[], list[TrialPoint]],
    spec: StudySpec,
    change: list[str],
    say: Callable[[str], None],
    enqueue: Callable[[Params, TrialRecord], None],
) -> None:
    """After a judging change (`change`, [] for none: nothing to do, nothing read): say so in
    one line, and queue again the stale stops that the new judging would not have stopped at
    once (`to_measure_again`). `read`: this measurement's trials, re-scored."""
    if not change:
        return
    points = read()
    again = to_measure_again(points, spec)
    say(announce(change, points, again))
    judging = specs.judging_id(spec)  # the judging that queues it: taken only under it
    for p in again:
        enqueue(p.params, TrialRecord(retry_of=p.number, judging_id=judging))


def to_measure_again(points: list[TrialPoint], spec: StudySpec) -> list[TrialPoint]:
    """The trials stopped early under a previous judging whose partial figures meet every SLO
    of `spec` (the single workload's, and each scenario's on its own figures): one per config,
    none whose config is queued or running already."""
    queued = {
        params_key(p.params)
        for p in points
        if p.state in ("WAITING", "RUNNING") and not p.stale_queue
    }
    out = []
    for p in points:
        key = params_key(p.params)
        if not p.stale_stop or p.record.reused_from is not None or key in queued:
            continue
        checks = [(spec.slo_limits(None), p.metrics)]
        checks += [(spec.slo_limits(n), p.scenario_metrics(n)) for n in p.scenario_names]
        if all(lim.met(dict(m)) for limits, m in checks for lim in limits if lim.metric in m):
            out.append(p)
            queued.add(key)
    return out


def announce(change: list[str], points: list[TrialPoint], again: list[TrialPoint]) -> str:
    """One line: what changed in the judging, that the stored trials are re-scored, the
    baseline kept, and which stopped trials are measured again."""
    measured = [p for p in points if p.measured]
    base = baseline_of(points)
    kept = f"; the baseline (trial {base.number}) is kept" if base is not None else ""
    stopped = sum(p.stale_stop for p in points)
    words = ""
    if stopped:
        numbers = ", ".join(str(p.number) for p in again) or "none"
        words = (
            f"; of the {stopped} trial(s) stopped early under the previous judging, those whose "
            f"partial figures meet the new SLOs are queued to run again: {numbers}"
        )
    return (
        f"the study file changed only how trials are judged ({'; '.join(change)}): the "
        f"{len(measured)} stored trial(s) are re-scored under the new objective/SLOs from "
        f"their stored metrics, none is measured again{kept}{words}"
    )
