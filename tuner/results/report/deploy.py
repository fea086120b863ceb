"""The report's "What to deploy": the best command with no SLO, under each SLO of the study file
and under all of them, each with its change against vLLM's defaults and every verdict; one row
(and one card) for the selections that chose the same trial with the same words.

The choice, the change and the verdicts are `tuner export`'s (`select_trial`, `judge`): computed
there once, drawn here as a table row and a card whose notes wrap (never cut off).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from markupsafe import Markup

from tuner.errors import UserError
from tuner.measure.modes import Objective
from tuner.results.commandline import shell_command
from tuner.results.export import justification
from tuner.results.report.render import macro
from tuner.results.selection import Selection, hold, judge, select_trial
from tuner.results.smallest import shipped_params
from tuner.results.study_file import study_file_words
from tuner.spec.figures import figure
from tuner.spec.metric_keys import HEADLINE_METRICS
from tuner.spec.parts import Measuring, Serving
from tuner.spec.sections import ObjectiveSpec
from tuner.spec.slo import parse_slo
from tuner.trial import StudyRecord, TrialPoint, baseline_of, have_capacities, words

if TYPE_CHECKING:
    from tuner.results.verifies import VerifyDoc


def _slo_sets(objective: ObjectiveSpec) -> list[tuple[str, str | None]]:
    """(title, SLO text) for: no SLO, each SLO entry of the study file, and all of them."""
    sets: list[tuple[str, str | None]] = [
        ("Best feasible trial (the study's own constraints)", None)
    ]
    entries = list(objective.slo)
    for text in entries:
        sets.append((f"Under SLO {text}", text))
    if len(entries) > 1:
        sets.append((f"Under all SLOs: {', '.join(entries)}", ",".join(entries)))
    return sets


def _trial_words(choice: Selection) -> str:
    """The trial recommended; held back: vLLM's defaults, and the candidate named."""
    if (candidate := choice.candidate) is not None:
        return f"{choice.point.number}: vLLM's defaults (candidate: trial {candidate.number})"
    return str(choice.point.number)


@dataclass(frozen=True)
class _Row:
    """One row of the summary table: a selection's figures in words, or why there is none."""

    title: str
    error: str | None = None  # no trial to recommend: why
    cells: list[str] = field(default_factory=list)  # the trial, (capacity,) figures, score
    change: list[str] = field(default_factory=list)  # against vLLM's defaults, what got worse
    doubts: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Card:
    """One command with the notes that justify it (and, held back, the candidate's)."""

    title: str
    trial: str
    first: bool  # unfolded
    export_args: str  # the study file, ` --slo ...`: its `tuner export`'s arguments
    command: str
    notes: list[str]
    candidate_number: int | None
    candidate: str | None  # the candidate's command, when held back
    row: int = 0  # its row in the summary table


def _row(title: str, choice: Selection, capacity: bool) -> _Row:
    """One selection: the trial, (capacity mode: its capacity first), the headline figures, the
    score, the change against vLLM's defaults, what got worse, and the doubts."""
    p = choice.point
    cells = [_trial_words(choice)]
    if capacity:
        rate = (
            words.rate(p.capacity_rps, p.capacity_capped, p.capacity_interval)
            if p.capacity_rps is not None
            else ""
        )
        cells.append(rate)
    cells += [figure(p.metrics.get(m)) for m in HEADLINE_METRICS]
    cells.append(figure(p.score, 3, sign=True))
    found = choice.comparison.lines() if choice.comparison is not None else []
    doubts = [v.text for v in choice.verdicts if v.doubt]
    return _Row(title, cells=cells, change=[*found, *choice.worse], doubts=doubts)


def _card(
    title: str, text: str | None, choice: Selection, spec: Serving, notes: list[str], first: bool
) -> _Card:
    """The command with the figures that justify it; held back: the defaults' command, then the
    candidate's, which `tuner export --candidate` writes."""
    candidate = choice.candidate
    return _Card(
        title=title,
        trial=_trial_words(choice),
        first=first,
        export_args=study_file_words() + (f" --slo {shlex.quote(text)}" if text else ""),
        command=shell_command(spec, choice.params),
        notes=notes,
        candidate_number=None if candidate is None else candidate.number,
        candidate=None
        if candidate is None
        else shell_command(spec, shipped_params(choice.smallest, candidate)),
    )


def best_commands(
    spec: Measuring,
    objective: Objective,
    points: Sequence[TrialPoint],
    study_name: str,
    simulated: bool,
    study: StudyRecord | None = None,
) -> Markup:
    """What `tuner export --slo` gives for each SLO of the study file: a summary table, then
    each command with the figures that justify it (the first one unfolded)."""
    baseline = baseline_of(points)
    capacity = have_capacities(points)
    heads = ["trial", *(["capacity"] if capacity else []), *HEADLINE_METRICS, "score"]
    heads += ["against vLLM's defaults", "doubts"]
    rows: list[_Row] = []
    cards: list[_Card] = []
    said: dict[tuple[object, ...], int] = {}  # a row's words -> its index (one row each)
    # a capacity study's SLO chose the rates its searches ran: no other SLO was measured
    for title, text in _slo_sets(spec.objective)[: 1 if capacity else None]:
        limits = parse_slo(text) if text else []
        try:
            choice = select_trial(points, study_name, limits=limits)
        except UserError as exc:
            rows.append(_Row(title, error=str(exc)))
            continue
        choice = hold(judge(choice, points, spec, objective, study, baseline))
        row = _row(title, choice, capacity)
        key = (*row.cells, *row.change, *row.doubts)
        if key in said:  # the same trial, figures and verdicts: one row, its titles joined
            i = said[key]
            rows[i] = replace(rows[i], title=f"{rows[i].title}; {title}")
            j = next(n for n, c in enumerate(cards) if c.row == i)
            cards[j] = replace(cards[j], title=rows[i].title)
            continue
        said[key] = len(rows)
        rows.append(row)
        notes = justification(spec, choice, study_name, simulated, baseline)
        cards.append(replace(_card(title, text, choice, spec, notes, not cards), row=said[key]))
    # no trial to recommend: the table's rows say why, and no empty card follows
    return macro("deploy.html.j2", "best_commands", heads=heads, rows=rows, cards=cards)


def verify_section(docs: Sequence[VerifyDoc]) -> Markup:
    """The report's "After the ship": every stored `tuner verify` of the study, oldest first
    (time, engine URL, vLLM version, measured figures, verdict); empty when none."""
    from tuner.results.verifies import verify_cells

    if not docs:
        return Markup()
    head = ("time", "trial", "engine URL", "vLLM", "figures measured", "exit", "verdict")
    rows = [verify_cells(doc) for doc in docs]
    return macro("deploy.html.j2", "verifies", head=head, rows=rows)
