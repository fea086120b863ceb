"""`tuner best`: the best trial's whole story on one screen, then the command to run.

The best feasible trial, the setting it was measured in (hardware, workload, SLO), its figures
with their intervals, its change against vLLM's defaults and everything that got worse, every
verdict (each block a `tuner.results.sections.SECTIONS` entry, in its order); the command comes
from the stored spec of its trial. Every figure is read through `tuner.trial`; the choice and
its judging are `tuner.results.selection`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

from tuner import trial as tr
from tuner.errors import UserError
from tuner.measure.mixes import objective_of
from tuner.results.commandline import shell_command
from tuner.results.export import check_deployable
from tuner.results.section import Shown
from tuner.results.sections import SECTIONS
from tuner.results.selection import Selection, closest_miss, hold, judge
from tuner.trial import StudyRecord, TrialPoint, specs


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
    objective = objective_of(spec)  # the study's, built once for its story
    baseline = tr.baseline_of(points)
    why = "the best feasible trial"
    chosen = Selection(top, why, ranked=tuple(ranked), notes=tuple(notes))
    choice = judge(chosen, points, spec, objective, study, baseline)
    rec, shown = choice.recommendation, hold(choice)  # shown: vLLM's defaults when held back
    role = " — a CANDIDATE, not recommended (below)" if shown.held else ""
    lines = [
        f"# best trial {top.number} of study {study_name}{role}"
        + (" (SIMULATED: figures are predictions, not measurements)" if top.simulated else "")
    ]
    blocks = Shown(points, spec, objective, study, choice)  # what every block reads (`SECTIONS`)
    lines += [f"# {line}" for section in SECTIONS for line in section.lines(blocks)]
    tuned = choice.params
    check_deployable(spec, top.number, tuned)
    if not shown.held or rec is None:
        return "\n".join([*lines, shell_command(spec, tuned)])
    lines += [f"# {line}" for line in rec.lines()]
    lines.append(shell_command(specs.spec_for(study, shown.point), shown.point.params))
    lines.append(f"# the candidate, trial {top.number} (not recommended yet):")
    lines += [f"#   {line}" for line in shell_command(spec, tuned).splitlines()]
    return "\n".join(lines)
