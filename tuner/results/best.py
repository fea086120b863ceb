"""`tuner best`: the best trial's whole story on one screen, then the command to run.

The best feasible trial, the setting it was measured in (hardware, workload, SLO), its figures
with their intervals, its change against vLLM's defaults and everything that got worse, every
verdict; the command comes from the stored spec of its trial. Every figure is read through
`tuner.trial`; the choice and its judging are `tuner.results.selection`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

from tuner import trial as tr
from tuner.errors import UserError
from tuner.measure.mixes import objective_of
from tuner.results.commandline import shell_command
from tuner.results.export import check_deployable
from tuner.results.selection import Selection, closest_miss, hold, judge
from tuner.results.setting import setting_lines
from tuner.results.shapes import shape_lines
from tuner.results.smallest import smallest_lines
from tuner.results.verdicts import zero_words
from tuner.spec.figures import figure
from tuner.spec.metric_keys import HEADLINE_METRICS, headline_words, metric_words
from tuner.spec.parts import Judging
from tuner.spec.slo import SloLimit, straddle_words
from tuner.trial import StudyRecord, TrialPoint, specs, words
from tuner.trial.words import at_rate, scenario_parts


def best_report(points: Sequence[TrialPoint], study_name: str, study: StudyRecord) -> str:
    """The whole story on one screen: the best feasible trial, the setting it was measured in
    (hardware, workload, SLO), its figures with their intervals, its change against vLLM's
    defaults and everything that got worse, every verdict; then the command to run. When the
    verdicts hold it back (`recommend`), the command is vLLM's defaults' and the tuned one
    follows as a commented candidate. Each command comes from the stored spec of its trial."""
    ranked, notes = tr.ranked(points), tr.miss_notes(points)
    if not ranked:
        unmeasured = not any(p.measured for p in points)
        closest = "no trial was measured (`tuner trials` says why)" if unmeasured else None
        missed = "".join(f"; {n}" for n in [*notes, closest or closest_miss(points)] if n)
        raise UserError(f"study {study_name!r} has no complete feasible trial yet{missed}")
    top = ranked[0]
    spec = specs.spec_for(study, top)
    baseline = tr.baseline_of(points)
    why = "the best feasible trial"
    choice = judge(
        Selection(top, why, ranked=tuple(ranked), notes=tuple(notes)), points, spec, study, baseline
    )
    rec, shown = choice.recommendation, hold(choice)  # shown: vLLM's defaults when held back
    role = " — a CANDIDATE, not recommended (below)" if shown.held else ""
    lines = [
        f"# best trial {top.number} of study {study_name}{role}"
        + (" (SIMULATED: figures are predictions, not measurements)" if top.simulated else ""),
        *(f"# {line}" for line in headline_lines(top, points, spec)),
        *(f"# {line}" for line in interval_lines(top, spec.slo_limits())),
        *(f"# {line}" for line in setting_lines(spec)),
    ]
    if choice.comparison is not None:
        lines += [f"# {line}" for line in choice.comparison.lines()]
    lines += [f"# {line}" for line in choice.worse]
    lines += [f"# {line}" for line in smallest_lines(choice.smallest, top)]
    lines += [f"# {v.text}" for v in choice.verdicts]
    lines += [f"# {line}" for line in shape_lines(spec, points)]
    tuned = choice.params
    check_deployable(spec, top.number, tuned)
    if not shown.held or rec is None:
        return "\n".join([*lines, shell_command(spec, tuned)])
    lines += [f"# {line}" for line in rec.lines()]
    lines.append(shell_command(specs.spec_for(study, shown.point), shown.point.params))
    lines.append(f"# the candidate, trial {top.number} (not recommended yet):")
    lines += [f"#   {line}" for line in shell_command(spec, tuned).splitlines()]
    return "\n".join(lines)


def interval_lines(top: TrialPoint, limits: Sequence[SloLimit] = ()) -> list[str]:
    """The headline figures' 95 % bootstrap intervals, in words (none stored: nothing); one
    with an SLO of `limits` inside it says so (it may keep the limit or break it)."""
    found = []
    for m in HEADLINE_METRICS:
        if (ci := top.ci(m)) is not None:
            label, unit = metric_words(m)
            straddle = straddle_words(m, ci, list(limits))
            found.append(f"{label} {figure(ci[0])}–{figure(ci[1])}{unit}")
            found[-1] += f" ({straddle})" if straddle else ""
    return [f"95% intervals: {', '.join(found)}"] if found else []


def headline_lines(top: TrialPoint, points: Sequence[TrialPoint], spec: Judging) -> list[str]:
    """The score and the headline figures: capacity mode's capacity first; a mix's scenarios
    each with their own score and figures."""
    shown = figure(top.score, 3, sign=True)
    score = f"score {shown} ({zero_words(top, points)}, lower is better)"
    found = top.record.capacity
    if top.record.scenarios:
        how = objective_of(spec).aggregate_words()
        head = f"{score}: {how} of the scenarios' scores"
        if top.capacity_rps is not None:
            head = f"capacity {words.rate(top.capacity_rps, top.capacity_capped)} over the " + (
                f"scenarios within the SLOs; {head}"
            )
        return [head, *(f"  {part}" for part in scenario_parts(top.record))]
    if found is not None:
        return [
            f"capacity {words.capacity_rate(found)} within the SLOs; {score}",
            f"{at_rate(found)}: " + ", ".join(headline_words(top.metrics)),
        ]
    return [f"{score}; " + ", ".join(headline_words(top.metrics))]
