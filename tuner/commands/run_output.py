"""What `tuner run` and `tuner plan` print once the trials end (what the run did, the hosts'
baselines, the best config or why there is none), and `tuner best`'s config: the study
commands' output (`tuner.commands.study`), on stderr through the live display's console and
on stdout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    import optuna
    from rich.console import Console

    from tuner.run.progress import RunView
    from tuner.run.session import RunResult
    from tuner.run.summary import RunSummary
    from tuner.trial.point import TrialPoint


def view() -> RunView:
    """The live display on stderr; once the trials end, what the run did."""
    from tuner.run.progress import ConsoleView, log_console

    return ConsoleView(log_console(), on_ran=print_summary)


def print_summary(console: Console, summary: RunSummary, points: list[TrialPoint]) -> None:
    """What the run did: trials, launches saved, engine time, hosts."""
    from tuner.run.summary import MAX_REFUSED_IN_A_ROW
    from tuner.spec.figures import trials_words
    from tuner.trial.uptime import summary_line

    if summary.interrupted_recovered:
        console.print(f"recovered interrupted {trials_words(summary.interrupted_recovered)}")
    if summary.precheck_wrong:
        console.print(
            f"the memory precheck was wrong about {trials_words(summary.precheck_wrong)}: "
            "see their `precheck_wrong` attr"
        )
    if summary.orphans_stopped:
        console.print(f"stopped {summary.orphans_stopped} engine(s) left by a previous run")
    console.print(
        f"{summary.ran} trial(s) run, {summary.new_configs} of them new configs; engine starts "
        f"saved: {summary.saved_by_precheck} by the memory precheck, {summary.saved_by_reuse} "
        "by reusing a measured config"
    )
    if summary.saved_by_rules:
        console.print(
            f"{summary.saved_by_rules} config(s) refused by vLLM's rules, never launched and "
            "not counted in n_trials (`tuner trials` says why each was refused)"
        )
    console.print(summary_line(summary))
    _print_hosts(console, points)
    if summary.refused_out:
        console.print(
            f"vLLM's rules refused {MAX_REFUSED_IN_A_ROW} configs in a row: the search space "
            "holds too few configs vLLM takes (see `tuner trials`), so the run stopped"
        )
    if summary.exhausted:
        console.print(
            "the sampler kept proposing configs already measured: the search space looks "
            "exhausted, so the run stopped early"
        )


def print_result(result: RunResult) -> None:
    """The best config (its robustness verdicts were stored by the run), or why none."""
    if result.best is not None:
        print_best(result.study)
    else:
        from tuner.results.selection import closest_miss

        closest = closest_miss(result.points) or "none was measured"
        typer.echo(f"no feasible trial yet: {closest}; `tuner trials` says why each", err=True)


def _print_hosts(console: Console, points: Sequence[TrialPoint]) -> None:
    """The hosts' baselines side by side, and any that differ beyond the noise."""
    from tuner.trial.hosts import baseline_table, differences

    lines = baseline_table(points)
    if len(lines) > 2:  # a header and more than one host
        for line in lines:
            console.print(line, markup=False, highlight=False)
    for warning in differences(points):
        console.print(f"[yellow]{warning}[/yellow]")


def print_best(study: optuna.Study, *, wide: bool = False) -> None:
    """The best trial of the study's current spec, its command built from that stored spec."""
    from tuner.results.best import best_report
    from tuner.results.table import wrap_comments
    from tuner.trial.reading import read_study

    read = read_study(study)
    text = best_report(read.current(), study.study_name, read.record)
    width = None if wide else _terminal_width()
    typer.echo(text if width is None else wrap_comments(text, width))


def _terminal_width() -> int | None:
    """The width to wrap `best`'s comment lines to: the terminal's, or $COLUMNS; None (lines
    whole) when the output goes to a file or a pipe and COLUMNS is unset."""
    import os
    import sys

    from rich.console import Console

    if os.environ.get("COLUMNS") or sys.stdout.isatty():
        return Console().width
    return None
