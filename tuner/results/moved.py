"""Everything that got worse against vLLM's defaults, not only the weighted metrics (pure).

The change against the defaults (`change.py`) states the headline metrics; a config can win on
them and lose elsewhere (the demo's best: mean TPOT −21 %, median ITL 41 → 241 ms, because
every decode step now carries a prefill chunk). `worse_than_defaults` lists every stored metric
of the chosen trial that moved the wrong way:

- **clearly worse**: both trials carry a 95 % bootstrap interval for it and the interval of the
  difference lies wholly on the worse side: `objective.clearly_better` with the roles swapped
  (the defaults clearly better than the trial), the one rule every verdict uses;
- **worse, no interval stored**: a metric the run measured without an interval
  (`measure.metrics.CI_METRICS` names the ones with one) that moved the wrong way by
  `NO_INTERVAL_WORSE` or more; nothing can say whether that is luck, so it is labelled so.

Spread figures (`std_*`) are left out (no direction is better), and so is capacity mode (each
config's latencies were measured at its own rate, so they do not compare).
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.measure.mixes import objective_of
from tuner.measure.objective import clearly_better
from tuner.results.change import Change, plain
from tuner.spec.metric_keys import direction
from tuner.spec.study import StudySpec
from tuner.trial import TrialPoint

# A figure with no interval is listed when it got this much worse (25 %: beyond the run-to-run
# spread of 2-core boxes, up to 25 % on identical runs, docs/objective.md "Noise").
NO_INTERVAL_WORSE = 0.25


@dataclass(frozen=True)
class Worse:
    """One metric the trial is worse on than the defaults, with the two intervals if stored."""

    change: Change
    ci: tuple[float, float] | None  # the trial's
    base_ci: tuple[float, float] | None  # the defaults'

    @property
    def clearly(self) -> bool:
        return self.ci is not None and self.base_ci is not None

    def words(self) -> str:
        """`median ITL 41 → 241 ms (+488 %; CI 220–260 against 38–44)`."""
        text = self.change.words()
        if self.ci is not None and self.base_ci is not None:
            lo, hi = self.ci
            blo, bhi = self.base_ci
            note = f"; CI {plain(lo)}–{plain(hi)} against {plain(blo)}–{plain(bhi)}"
        else:
            note = "; no interval stored"
        return text[:-1] + note + ")"


def worse_than_defaults(
    spec: StudySpec, point: TrialPoint, baseline: TrialPoint | None
) -> tuple[Worse, ...]:
    """Every stored metric on which `point` is worse than the baseline: clearly (by the
    intervals), or by `NO_INTERVAL_WORSE` or more where no interval was stored."""
    if baseline is None or baseline.number == point.number:
        return ()
    if not objective_of(spec).figures_against_baseline:
        return ()
    out = []
    for name, after in point.metrics.items():
        before = baseline.metrics.get(name)
        if before is None or direction(name) is None or name.startswith("std_"):
            continue
        change = Change(name, before, after)
        if change.better is not False:
            continue
        ci, base_ci = point.ci(name), baseline.ci(name)
        if ci is not None and base_ci is not None:
            clear = clearly_better(
                {name: base_ci}, {name: ci}, {name: 1.0}, baseline.metrics, point.metrics
            )
            if clear:
                out.append(Worse(change, ci, base_ci))
        elif change.percent is not None and abs(change.percent) >= NO_INTERVAL_WORSE * 100:
            out.append(Worse(change, None, None))
    return tuple(sorted(out, key=lambda w: (not w.clearly, w.change.metric)))


def worse_lines(spec: StudySpec, point: TrialPoint, baseline: TrialPoint | None) -> list[str]:
    """In words, one line; or a line saying nothing got clearly worse;
    nothing where no comparison is made (no baseline, the baseline itself, capacity mode)."""
    found = worse_than_defaults(spec, point, baseline)
    if baseline is None or baseline.number == point.number:
        return []
    if not objective_of(spec).figures_against_baseline:
        return []
    if not found:
        return [
            f"nothing stored got clearly worse than vLLM's defaults (baseline trial "
            f"{baseline.number})"
        ]
    # one line: an indented line would read as a wrapped comment's continuation (`best`)
    each = "; ".join(w.words() for w in found)
    return [f"WORSE than vLLM's defaults (baseline trial {baseline.number}): {each}"]
