"""The one order of trials, and the one reference trial (pure).

`ranked` is the order that `tuner best`, `tuner export`, the report and `--confirm` share;
`reference` is the trial every score is relative to, for the pipeline and the screen alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tuner.trial.point import TrialPoint


def confirmation_runs(points: Sequence[TrialPoint]) -> dict[int, list[float]]:
    """Every measured score of each config that `--confirm` re-measured, the original first."""
    by_number = {p.number: p for p in points}
    runs: dict[int, list[float]] = {}
    for p in points:
        origin = by_number.get(p.confirm_of) if p.confirm_of is not None else None
        if origin is None or not p.feasible or p.score is None or origin.score is None:
            continue
        runs.setdefault(origin.number, [origin.score]).append(p.score)
    return runs


def ranked(
    points: Sequence[TrialPoint], eligible: Callable[[TrialPoint], bool] | None = None
) -> list[TrialPoint]:
    """Candidates best first: by the mean score over `--confirm` runs where there are some (so
    one lucky run does not win), else by the single score; ties go to the earlier trial.

    Candidates are feasible trials with a score (`eligible` replaces "feasible", e.g. with an
    export-time SLO); re-measurements are never candidates themselves.
    """
    runs = confirmation_runs(points)
    keep = eligible or (lambda p: p.feasible)
    pool = [p for p in points if keep(p) and p.score is not None and p.confirm_of is None]

    def key(p: TrialPoint) -> tuple[float, int]:
        scores = runs.get(p.number) or [p.score]
        return (sum(scores) / len(scores), p.number)

    return sorted(pool, key=key)


def best(points: Sequence[TrialPoint]) -> TrialPoint | None:
    top = ranked(points)
    return top[0] if top else None


def baseline_of(points: Sequence[TrialPoint], host: str | None = None) -> TrialPoint | None:
    """The measured baseline trial (of `host`, when given), if any."""
    return next((p for p in points if p.baseline and p.metrics and host in (None, p.host)), None)


def host_baselines(points: Sequence[TrialPoint]) -> dict[str, TrialPoint]:
    """Each host's measured baseline (its first), in the order the hosts first measured one."""
    out: dict[str, TrialPoint] = {}
    for p in sorted(points, key=lambda p: p.number):
        if p.baseline and p.metrics and p.host is not None:
            out.setdefault(p.host, p)
    return out


def reference(points: Sequence[TrialPoint], host: str | None = None) -> TrialPoint | None:
    """What scores are relative to: the measured baseline of this host; when vLLM's defaults
    could not be measured (refused, crashed), the first measured trial (of this host first).
    Without a host, the first baseline measured. None: nothing measured yet."""
    measured = [p for p in points if p.measured]
    if not measured:
        return None
    return min(
        measured, key=lambda p: (host is not None and p.host != host, not p.baseline, p.number)
    )


def params_key(params: Mapping[str, Any]) -> tuple:
    """Parameters as a comparable key: floats from a stepped range compare as the step meant."""
    return tuple(sorted((k, round(v, 9) if isinstance(v, float) else v) for k, v in params.items()))
