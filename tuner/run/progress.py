"""What a study reports while it runs; a rich live display for people, silence for tests."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    Progress,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)

from tuner.spec.figures import figure
from tuner.spec.values import Params
from tuner.trial.words import figures, trial_line

if TYPE_CHECKING:
    from tuner.run.outcome import Outcome
    from tuner.run.summary import RunSummary
    from tuner.trial.point import TrialPoint

REASON_CHARS = 400  # a longer reason: its first sentences that fit (engine log lines)
# Seconds between two plain progress lines while a trial runs and the output is not a terminal
# (nohup, a log file: no live display there); the tests set it low.
HEARTBEAT_ENV = "TUNER_PROGRESS_INTERVAL_S"
HEARTBEAT_S = 30.0
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")


def log_console(file: IO[str] | None = None) -> Console:
    """The run's console, on stderr (or `file`): on a terminal rich wraps lines to its width;
    into a log file or a pipe every line stays whole (rich would otherwise hard-wrap at 80
    columns, `output 353.3 \\ntok/s`, and `grep` would miss it)."""
    console = Console(file=file, stderr=file is None)
    console.soft_wrap = not console.is_terminal
    return console


def first_sentences(text: str, chars: int = REASON_CHARS) -> str:
    """The sentences of `text` that fit in `chars`, and always the whole first one: a reason
    is shortened between sentences, never in the middle of one (`tuner trials` has it whole)."""
    out = ""
    for sentence in _SENTENCE_END.split(text.strip()):
        if out and len(out) + 1 + len(sentence) > chars:
            return out + " (…)"
        out = f"{out} {sentence}" if out else sentence
    return out


def heartbeat_s() -> float:
    """The interval of the plain progress lines ($TUNER_PROGRESS_INTERVAL_S, else 30 s)."""
    try:
        return max(float(os.environ.get(HEARTBEAT_ENV) or HEARTBEAT_S), 0.05)
    except ValueError:
        return HEARTBEAT_S


def describe(outcome: Outcome) -> str:
    """One line (rich markup) for a finished trial."""
    record = outcome.record
    if outcome.kind == "reused":
        return f"same parameters as trial {record.reused_from}: result reused, not launched"
    reason = escape(first_sentences(record.failure_reason or ""))
    if outcome.kind == "refused":
        return f"[yellow]not launched[/yellow] ({record.failure_kind}): {reason}"
    if outcome.kind == "failed":
        return f"[red]failed[/red] ({record.failure_kind}): {reason}"
    if outcome.kind == "pruned":
        why = escape(first_sentences(str(outcome.record.pruned_reason or "")))
        if outcome.record.skip_prediction is not None and not outcome.record.engine_s:
            return f"[yellow]not launched[/yellow]: {why}"  # ruled out by prediction
        at = outcome.record.pruned_at_s or 0.0
        reached = figures(outcome.metrics, None, ", ", partial=True) if outcome.metrics else ""
        then = f" ({escape(reached)})" if reached else ""  # marked as `tuner trials` marks them
        return f"[magenta]stopped early[/magenta] after {at:.1f} s of workload{then}: {why}"
    tag = "" if outcome.feasible else " [yellow](breaks a constraint)[/yellow]"
    return escape(trial_line(outcome.record, outcome.metrics or {})) + tag


class StudyProgress:
    """What a loop reports as its trials run: this one shows nothing (tests, benchmarks)."""

    def start(self, total: int) -> None: ...
    def trial(self, index: int, number: int, params: Params) -> None: ...
    def phase(self, text: str) -> None: ...
    def done(
        self, number: int, outcome: Outcome, best: float | None, *, counted: bool = True
    ) -> None: ...
    def stop(self) -> None: ...


def _display(console: Console, *, labelled: bool) -> Progress:
    """The live line(s): trial i/N, bar, elapsed, ETA, best, phase; each slot's label first.
    Not a terminal (nohup, a log file): disabled, the tasks kept but never drawn (rich would
    print the last state when it stops: a bar line at the end of the log); the plain lines
    (`RichProgress._beat`, each trial's own) are the log's progress."""
    return Progress(
        *([TextColumn("{task.description}")] if labelled else []),
        TextColumn("[bold]trial {task.completed:.0f}/{task.total:.0f}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TextColumn("eta {task.fields[eta]}"),
        TextColumn("best {task.fields[best]}"),
        TextColumn("{task.fields[phase]}"),
        console=console,
        transient=False,
        disable=not console.is_terminal,
    )


class RichProgress(StudyProgress):
    """Trial i of N, the phase, the best score so far, elapsed time and an ETA.

    With `display` (`ConsoleView`'s) and a `label`, one line of a display that shows every
    GPU slot; whoever made the display starts and stops it."""

    def __init__(
        self, console: Console | None = None, *, label: str = "", display: Progress | None = None
    ) -> None:
        self.console = console or log_console()
        self.label = label
        self._owns = display is None
        self._progress = display or _display(self.console, labelled=False)
        self._task: TaskID | None = None
        self._t0 = time.monotonic()
        self._finished = 0
        self._best = "-"
        self._phase = ""
        self._running: tuple[int, float] | None = None  # the trial that runs, since when
        self._stop_beats = threading.Event()

    def start(self, total: int) -> None:
        if self._owns:
            self._progress.start()
        if not self.console.is_terminal:
            threading.Thread(target=self._beats, name="progress-lines", daemon=True).start()
        self._t0 = time.monotonic()
        self._task = self._progress.add_task(
            escape(self.label), total=total, phase="", best="-", eta="-"
        )

    def _print(self, text: str) -> None:
        self.console.print(f"{escape(self.label)} {text}" if self.label else text)

    def trial(self, index: int, number: int, params: Params) -> None:
        shown = " ".join(f"{k}={figure(v)}" for k, v in params.items())
        self._print(f"[dim]trial {number}: {escape(shown)}[/dim]")
        self._running = (number, time.monotonic())
        self.phase("validating")

    def phase(self, text: str) -> None:
        self._phase = text
        if self._task is not None:
            self._progress.update(self._task, phase=text)

    def _beat(self) -> None:
        """One plain line on the trial that runs: where it is and for how long (no live
        display when the output is not a terminal, so this is all a log shows meanwhile)."""
        running = self._running
        if running is None:
            return
        number, t0 = running
        total = next((t.total for t in self._progress.tasks if t.id == self._task), None)
        done = f"{self._finished}/{total:.0f}" if total else str(self._finished)
        best = f", best {self._best}" if self._best != "-" else ""
        line = (
            f"trial {number}: {self._phase or 'running'}, {time.monotonic() - t0:.0f} s in "
            f"({done} trials done{best})"
        )
        self.console.print(
            f"{self.label} {line}" if self.label else line, markup=False, highlight=False
        )

    def _beats(self) -> None:
        interval = heartbeat_s()
        while not self._stop_beats.wait(interval):
            self._beat()

    def done(
        self, number: int, outcome: Outcome, best: float | None, *, counted: bool = True
    ) -> None:
        """`counted`: the trial uses up one of the budget's (`summary.in_budget`); a reused
        result or a config vLLM's rules refused does not advance "trial i/N"."""
        self._running = None
        self._print(f"trial {number}: {describe(outcome)}")
        if not counted:
            return
        self._finished += 1
        if best is not None:
            self._best = figure(best, 3, sign=True)  # never "-0.000"
        if self._task is not None:
            task = next(t for t in self._progress.tasks if t.id == self._task)
            remaining = max((task.total or 0) - self._finished, 0)
            per_trial = (time.monotonic() - self._t0) / self._finished
            eta = time.strftime("%H:%M:%S", time.gmtime(per_trial * remaining))
            self._progress.update(self._task, advance=1, best=self._best, eta=eta, phase="")

    def stop(self) -> None:
        self._stop_beats.set()
        if self._owns:
            self._progress.stop()


class RunView:
    """How a whole run shows itself (`tuner.run.session.run_study`); this one shows nothing
    (benchmarks, tests)."""

    def progress(self, slot: str | None) -> StudyProgress:
        """The progress of one loop: a GPU slot's (its label), or the run's (None)."""
        return StudyProgress()

    def start(self) -> None:
        """The GPU slots' loops are about to start (their shared display)."""

    def stop(self) -> None:
        """Every GPU slot's loop has ended."""

    def say(self, text: str) -> None:
        """One line about what the run does next."""

    def ran(self, summary: RunSummary, points: list[TrialPoint]) -> None:
        """The trials (and their confirmations) ended; the robustness checks come next."""


class ConsoleView(RunView):
    """The rich live display on the console: one line per GPU slot, or one for the run."""

    def __init__(
        self,
        console: Console,
        on_ran: Callable[[Console, RunSummary, list[TrialPoint]], None] | None = None,
    ) -> None:
        """`on_ran(console, summary, points)`: what the run did, shown once the trials end."""
        self.console = console
        self._on_ran = on_ran
        self._display: Progress | None = None

    def progress(self, slot: str | None) -> StudyProgress:
        if slot is None:
            return RichProgress(self.console)
        if self._display is None:  # one live display for every GPU slot (rich allows one)
            self._display = _display(self.console, labelled=True)
        return RichProgress(self.console, label=slot, display=self._display)

    def start(self) -> None:
        if self._display is not None:
            self._display.start()

    def stop(self) -> None:
        if self._display is not None:
            self._display.stop()

    def say(self, text: str) -> None:
        self.console.print(text, soft_wrap=True, markup=False, highlight=False)  # whole lines

    def ran(self, summary: RunSummary, points: list[TrialPoint]) -> None:
        if self._on_ran is not None:
            self._on_ran(self.console, summary, points)
