"""The report's "What to deploy": the best command with no SLO, under each SLO of the study file
and under all of them, each with its change against vLLM's defaults and every verdict.

The choice, the change and the verdicts are `tuner export`'s (`select_trial`, `judge`): computed
there once, drawn here as a table row and a card whose notes wrap (never cut off).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from markupsafe import Markup

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
from tuner.results.report.render import macro
from tuner.results.smallest import shipped_params
from tuner.spec.figures import figure
from tuner.spec.metric_keys import HEADLINE_METRICS
from tuner.spec.slo import parse_slo
from tuner.spec.study import StudySpec
from tuner.trial import StudyRecord, TrialPoint, baseline_of


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


def _row(title: str, choice: Selection, capacity: bool, worse: list[str]) -> dict[str, Any]:
    """One selection: the trial, (capacity mode: its capacity first), the headline figures, the
    score, the change against vLLM's defaults, what got worse, and the doubts."""
    p = choice.point
    cells = [_trial_words(choice)]
    if capacity:
        rate = words.rate(p.capacity_rps, p.capacity_capped) if p.capacity_rps is not None else ""
        cells.append(rate)
    cells += [figure(p.metrics.get(m)) for m in HEADLINE_METRICS]
    cells.append(figure(p.score, 3, sign=True))
    found = choice.comparison.lines() if choice.comparison is not None else []
    doubts = [v.text for v in choice.verdicts if v.doubt]
    return {
        "title": title,
        "error": None,
        "cells": cells,
        "change": found + worse,
        "doubts": doubts,
    }


def _card(
    title: str, text: str | None, choice: Selection, spec: StudySpec, notes: list[str], first: bool
) -> dict[str, Any]:
    """The command with the figures that justify it; held back: the defaults' command, then the
    candidate's, which `tuner export --candidate` writes."""
    rec = choice.recommendation
    candidate = rec.candidate if choice.held and rec is not None else None
    return {
        "title": title,
        "trial": _trial_words(choice),
        "first": first,
        "flag": f" --slo {shlex.quote(text)}" if text else "",
        "command": shell_command(spec, choice.params),
        "notes": notes,
        "candidate_number": None if candidate is None else candidate.number,
        "candidate": None
        if candidate is None
        else shell_command(spec, shipped_params(choice.smallest, candidate)),
    }


def best_commands(
    spec: StudySpec,
    points: Sequence[TrialPoint],
    study_name: str,
    simulated: bool,
    study: StudyRecord | None = None,
) -> Markup:
    """What `tuner export --slo` gives for each SLO of the study file: a summary table, then
    each command with the figures that justify it (the first one unfolded)."""
    baseline = baseline_of(points)
    capacity = objective_of(spec.objective).rated
    heads = ["trial", *(["capacity"] if capacity else []), *HEADLINE_METRICS, "score"]
    heads += ["against vLLM's defaults", "doubts"]
    rows: list[dict[str, Any]] = []
    cards: list[dict[str, Any]] = []
    for title, text in _slo_sets(spec):
        limits = parse_slo(text) if text else []
        try:
            choice = select_trial(points, study_name, limits=limits)
        except UserError as exc:
            rows.append({"title": title, "error": str(exc)})
            continue
        choice = hold(judge(choice, points, spec, study, baseline))
        rec = choice.recommendation
        subject = rec.candidate if choice.held and rec is not None else choice.point
        rows.append(_row(title, choice, capacity, worse_lines(spec, subject, baseline)))
        notes = justification(spec, choice, study_name, simulated, baseline)
        cards.append(_card(title, text, choice, spec, notes, first=not cards))
    # no trial to recommend: the table's rows say why, and no empty card follows
    return macro("deploy.html.j2", "best_commands", heads=heads, rows=rows, cards=cards)


def verify_section(docs: Sequence[dict[str, Any]]) -> Markup:
    """The report's "After the ship": every stored `tuner verify` of the study, oldest first
    (time, engine URL, vLLM version, measured figures, verdict); empty when none."""
    from tuner.results.verifies import figures_words, verify_row

    if not docs:
        return Markup()
    head = ("time", "trial", "engine URL", "vLLM", "figures measured", "exit", "verdict")
    rows = [
        (
            r["verified_at"],
            r["trial"],
            r["base_url"],
            r["vllm_version"] or "?",
            figures_words(r["figures"]),
            r["exit_code"],
            r["verdict"],
        )
        for r in map(verify_row, docs)
    ]
    return macro("deploy.html.j2", "verifies", head=head, rows=rows)
