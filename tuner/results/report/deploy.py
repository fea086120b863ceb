"""The report's "What to deploy": the best command with no SLO, under each SLO of the study file
and under all of them, each with its change against vLLM's defaults and every verdict.

The choice, the change and the verdicts are `tuner export`'s (`select_trial`, `judge`): computed
there once, drawn here as a table row and a card whose notes wrap (never cut off).
"""

from __future__ import annotations

import html
import shlex
from collections.abc import Sequence
from typing import Any

from tuner.errors import UserError
from tuner.measure.modes import objective_of
from tuner.results import capacity_words as words
from tuner.results.commandline import shell_command
from tuner.results.export import (
    Selection,
    hold,
    judge,
    justification,
    select_trial,
)
from tuner.results.moved import worse_lines
from tuner.results.smallest import shipped_params
from tuner.spec.figures import figure
from tuner.spec.metric_keys import HEADLINE_METRICS
from tuner.spec.slo import parse_slo
from tuner.spec.study import StudySpec
from tuner.trial import StudyRecord, TrialPoint, baseline_of


def _e(value: object) -> str:
    return html.escape(str(value))


def _slo_sets(spec: StudySpec) -> list[tuple[str, str | None]]:
    """(title, SLO text) for: no SLO, each SLO entry of the study file, and all of them."""
    sets: list[tuple[str, str | None]] = [
        ("Best feasible trial (the study's own constraints)", None)
    ]
    entries = list(spec.objective.slo)
    for text in entries:
        sets.append((f"Under SLO {text}", text))
    if len(entries) > 1:
        sets.append((f"Under all SLOs: {', '.join(entries)}", ",".join(entries)))
    return sets


def _trial_words(choice: Selection) -> str:
    """The trial recommended; held back: vLLM's defaults, and the candidate named."""
    rec = choice.recommendation
    if choice.held and rec is not None:
        return f"{choice.point.number}: vLLM's defaults (candidate: trial {rec.candidate.number})"
    return str(choice.point.number)


def _row(title: str, choice: Selection, capacity: bool, worse: list[str]) -> str:
    """One selection: the trial, (capacity mode: its capacity first), the headline figures, the
    score, the change against vLLM's defaults, what got worse, and the doubts."""
    p = choice.point
    cells = [f"<td>{_e(_trial_words(choice))}</td>"]
    if capacity:
        rate = words.rate(p.capacity_rps, p.capacity_capped) if p.capacity_rps is not None else ""
        cells.append(f"<td>{_e(rate)}</td>")
    cells += [f"<td>{_e(figure(p.metrics.get(m)))}</td>" for m in HEADLINE_METRICS]
    cells.append(f"<td>{_e(figure(p.score, 3, sign=True))}</td>")
    found = choice.comparison.lines() if choice.comparison is not None else []
    found += worse
    change = "<br>".join(_e(line) for line in found)
    doubts = "<br>".join(_e(v.text) for v in choice.verdicts if v.doubt) or "none"
    cells.append(f'<td class="words">{change}</td><td class="words doubt">{doubts}</td>')
    return f'<tr><td class="l">{_e(title)}</td>{"".join(cells)}</tr>'


def _card(
    title: str, text: str | None, choice: Selection, spec: StudySpec, notes: list[str], first: bool
) -> str:
    """The command with the figures that justify it; held back: the defaults' command, then the
    candidate's, which `tuner export --candidate` writes."""
    flag = f" --slo {shlex.quote(text)}" if text else ""
    rec = choice.recommendation
    candidate = ""
    if choice.held and rec is not None:
        candidate_params = shipped_params(choice.smallest, rec.candidate)
        candidate = (
            f"<p class='sub'>The candidate, trial {rec.candidate.number}, not recommended yet "
            f"(<code>tuner export STUDY.yaml{_e(flag)} --candidate</code>):</p>"
            f'<pre class="cmd">{_e(shell_command(spec, candidate_params))}</pre>'
        )
    return (
        f"<details{' open' if first else ''}><summary><b>{_e(title)}</b>: trial "
        f"{_e(_trial_words(choice))}</summary>"
        f'<pre class="cmd">{_e(shell_command(spec, choice.params))}</pre>'
        f'<pre class="notes">{_e(chr(10).join(notes))}</pre>{candidate}'
        f"<p class='sub'>Same as <code>tuner export STUDY.yaml{_e(flag)}</code>; "
        "<code>--format yaml</code> gives a <code>vllm serve --config</code> file.</p>"
        "</details>"
    )


def best_commands(
    spec: StudySpec,
    points: Sequence[TrialPoint],
    study_name: str,
    simulated: bool,
    study: StudyRecord | None = None,
) -> str:
    """What `tuner export --slo` gives for each SLO of the study file: a summary table, then
    each command with the figures that justify it (the first one unfolded)."""
    baseline = baseline_of(points)
    capacity = objective_of(spec).has_capacity
    heads = ["trial", *(["capacity"] if capacity else []), *HEADLINE_METRICS, "score"]
    heads += ["against vLLM's defaults", "doubts"]
    rows: list[str] = []
    cards: list[str] = []
    for title, text in _slo_sets(spec):
        limits = parse_slo(text) if text else []
        try:
            choice = select_trial(points, study_name, limits=limits)
        except UserError as exc:
            cell = f'<td class="l err" colspan="{len(heads)}">{_e(exc)}</td>'
            rows.append(f'<tr><td class="l">{_e(title)}</td>{cell}</tr>')
            continue
        choice = hold(judge(choice, points, spec, study, baseline))
        rec = choice.recommendation
        subject = rec.candidate if choice.held and rec is not None else choice.point
        rows.append(_row(title, choice, capacity, worse_lines(spec, subject, baseline)))
        notes = justification(spec, choice, study_name, simulated, baseline)
        cards.append(_card(title, text, choice, spec, notes, first=not cards))
    head = "".join(f"<th>{_e(h)}</th>" for h in heads)
    table = f'<table><tr><th class="l">selection</th>{head}</tr>{"".join(rows)}</table>'
    # no trial to recommend: the table's rows say why, and no empty card follows
    return table + (f'<div class="card">{"".join(cards)}</div>' if cards else "")


def verify_section(docs: Sequence[dict[str, Any]]) -> str:
    """The report's "After the ship": every stored `tuner verify` of the study, oldest first
    (time, engine URL, vLLM version, measured figures, verdict); empty when none."""
    from tuner.results.verifies import figures_words, verify_row

    if not docs:
        return ""
    head = ("time", "trial", "engine URL", "vLLM", "figures measured", "exit", "verdict")
    rows = []
    for r in map(verify_row, docs):
        cells = (
            r["verified_at"],
            r["trial"],
            r["base_url"],
            r["vllm_version"] or "?",
            figures_words(r["figures"]),
            r["exit_code"],
            r["verdict"],
        )
        rows.append("<tr>" + "".join(f'<td class="l">{_e(c)}</td>' for c in cells) + "</tr>")
    ths = "".join(f'<th class="l">{_e(h)}</th>' for h in head)
    return (
        "<h2>After the ship: tuner verify</h2>"
        '<p class="sub">Each run of <code>tuner verify</code> against a running engine: the '
        "shipped config re-measured and judged against the study's figures (exit 0 holds, 1 no "
        "verdict, 3 drift or changed, 4 breaks the SLO; docs/verify.md).</p>"
        f'<div class="wrap"><table><thead><tr>{ths}</tr></thead>{"".join(rows)}</table></div>'
    )
