"""The morning's words, second round (issue 49, item 6): "which changed flags carry the
gain" says which; a log that is not a terminal ends on a plain line, never a progress bar;
`--help` at 80 columns keeps each sentence whole. In process, no study run."""

from __future__ import annotations

import io

from typer.testing import CliRunner

from tuner.cli import app
from tuner.results.smallest import smallest_lines
from tuner.run.progress import RichProgress, log_console
from tuner.trial import SmallestChange, TrialPoint, TrialRecord


def test_unchecked_flags_say_which_are_kept() -> None:
    point = TrialPoint.measured_as(5, {"block-size": 32}, TrialRecord(metrics={}))
    change = SmallestChange(None, False, "not checked: the config was refused (SIMULATED)", trial=5)
    assert smallest_lines(change, point) == [
        "which changed flags carry the gain: not known (not checked: the config was refused "
        "(SIMULATED)), so the command keeps every flag trial 5 changes"
    ]
    noise = "not decided: its gain is itself within noise; every changed flag kept"
    line = smallest_lines(SmallestChange(None, False, noise, trial=5), point)[0]
    assert line.endswith(
        "(not decided: its gain is itself within noise), so the command keeps "
        "every flag trial 5 changes"
    ), line


def test_a_log_ends_without_a_progress_line() -> None:
    out = io.StringIO()  # nohup's file: not a terminal
    progress = RichProgress(log_console(out))
    progress.start(3)
    progress.trial(0, 0, {"max-num-seqs": 8})
    progress.phase("measuring")
    progress.stop()
    assert out.getvalue() == "trial 0: max-num-seqs=8\n"  # no "trial 0/3 ━━━ … measuring"


def test_help_at_80_columns_keeps_sentences_whole() -> None:
    runner = CliRunner()
    listing = runner.invoke(app, ["--help"], env={"COLUMNS": "80"}).output
    assert "a night's\n" not in listing  # the docstring's own line break, kept by typer
    export = runner.invoke(app, ["export", "--help"], env={"COLUMNS": "80"}).output
    lines = [line.strip() for line in export.splitlines()]
    assert "clearly better" not in lines  # "...is not clearly better" / "than them" before
    assert any("clearly better than them" in line for line in lines), export
