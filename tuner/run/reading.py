"""The study as the loop reads it: once per trial, not once per question.

`StudyReading` caches what one read of the study gives (every trial as a `TrialPoint`, and the
study's attrs as a `StudyRecord`), and the loop's writes to the study go through it (`enqueue`,
`tell`, `bind`, `recover`, `mark_simulated`), each of which forgets the cached read: every
answer is as fresh as the loop's own last write, and the loop never drops the cache by hand.
What other workers (and the heartbeat's watchdog) may have written is the one thing it cannot
see: the loop asks for that by name, `refresh`, as a trial starts and while it waits on them.
Writes to the trial in flight (`ask`, its owner and host, what the pipeline records) are not
among them, on purpose: the trial is judged against the study as it stood when it started, and
its `tell` makes them visible. `reads` counts the storage reads (tests hold the loop to it).

A run takes only its own spec's queued work (issue 24, item 4; docs/scale-out.md): `study.ask`
takes the oldest WAITING trial of the study, whichever spec queued it: after an
`--accept-changes`, a `--confirm` re-run or a retry left by the old spec would run first under
the new one, outside its search space, and could become its reference. `ask` here takes only the
queued trials it is given (the run's own spec's, `StudyReading.waiting`), oldest first, else
makes a new trial; another spec's queued work stays WAITING for a run of that spec.
"""

from __future__ import annotations

import re
import threading
from typing import TYPE_CHECKING

from tuner import trial as tr
from tuner.errors import BOX_FAULTS
from tuner.run.recovery import Recovered, recover
from tuner.store import optuna_adapter as adapter
from tuner.trial import FailureKind, StudyRecord, TrialPoint, TrialRecord, params_key
from tuner.trial.reading import FinishedTrials, StudyRead, read_study

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import optuna

    from tuner.spec.values import Params
    from tuner.store.storage import Store

# Taking a WAITING trial reads then updates its row: atomic on PostgreSQL (a row lock), not on
# SQLite, which ignores FOR UPDATE. One process runs a SQLite study (the lock), so serializing
# its GPU slots' asks here makes taking a queued trial atomic there too.
_ASK_LOCK = threading.Lock()


def ask(study: optuna.Study, waiting: Sequence[TrialPoint]) -> optuna.Trial:
    """The oldest of `waiting` that no other worker took first, else a new trial: RUNNING,
    ours to end."""
    with _ASK_LOCK:
        for p in sorted(waiting, key=lambda p: p.number):
            trial = adapter.take_waiting(study, p.number)
            if trial is not None:
                return trial
        return adapter.new_trial(study)


def queue_warm_starts(
    points: Callable[[], Sequence[TrialPoint]],
    configs: Sequence[tuple[str, Params]],
    host: str | None,
    say: Callable[[str], None],
    enqueue: Callable[[Params, TrialRecord], None],
) -> None:
    """Queue `--from-plan` / `--warm-start` configs (source, params), each once per
    measurement: a config that a trial of this measurement already has (measured, stopped,
    queued or running) is skipped with one line saying which trial. One measured only under
    an older spec (before `--accept-changes`) is queued: it must be measured under this one.
    `points`: this measurement's trials, read only when there are configs."""
    for source, params in configs:
        key = params_key(params)
        there = [p for p in points() if p.state != "FAIL" and params_key(p.params) == key]
        if there:
            what = "queued" if there[0].state == "WAITING" else there[0].status
            say(f"skipped {source}: its config is trial {there[0].number} ({what}) already")
            continue
        enqueue(params, TrialRecord(warm_start=source, host=host))


# Configs that fail at start for reasons of their own: they say nothing about the study.
CONFIG_FAILURES = tr.PREDICTABLE | {FailureKind.PORT_IN_USE}


class StudyReading:
    """One study's trials and attrs, read at most once between two of the loop's writes,
    and the writes themselves."""

    def __init__(self, study: optuna.Study, spec_id: str | None = None) -> None:
        """`spec_id`: the spec this run measures under (None: the study's current one)."""
        self.study = study
        self.spec_id = spec_id
        self.reads = 0
        self._read: StudyRead | None = None
        self._finished = FinishedTrials()  # each finished trial decoded once per run

    def _drop(self) -> None:
        """Forget what was read: the next question reads the study again."""
        self._read = None

    def refresh(self) -> None:
        """Other workers may have written since the last read: the next question reads anew.
        Not for the loop's own writes: those go through the methods below."""
        self._drop()

    # The loop's writes: each forgets the cached read ---------------------------------------

    def bind(self, spec_id: str) -> None:
        """Measure under `spec_id` from now on (`tuner.run.rejudge.bind` stored it)."""
        self.spec_id = spec_id
        self._drop()

    def enqueue(self, params: Params, record: TrialRecord) -> None:
        """Queue a trial with `record` attached."""
        self.study.enqueue_trial(dict(params), user_attrs=record.encode())
        self._drop()

    def tell(
        self,
        trial: optuna.Trial,
        values: Sequence[float] | None = None,
        *,
        state: optuna.trial.TrialState | None = None,
    ) -> None:
        """End `trial` (`optuna.Study.tell`): with `values`, or in `state`."""
        self.study.tell(trial, values, state=state)
        self._drop()

    def mark_simulated(self) -> None:
        """Label the study simulated (`tuner.trial.mark_simulated`), unless it is already."""
        if not self.record.simulated:
            tr.mark_simulated(self.study)
            self._drop()

    def recover(self, store: Store, *, retry: bool) -> Recovered:
        """End a dead tuner's engines and RUNNING trials (`tuner.run.recovery.recover`)."""
        done = recover(self.study, store, retry=retry)
        if done.interrupted:
            self._drop()
        return done

    # Reads ---------------------------------------------------------------------------------

    def read(self) -> StudyRead:
        """The last read of the study, or a new one after a write or a `refresh`."""
        read = self._read  # a write may come from the heartbeat thread (`recover`)
        if read is None:
            self.reads += 1
            read = self._read = read_study(self.study, self._finished)
        return read

    @property
    def record(self) -> StudyRecord:
        return self.read().record

    def points(self) -> list[TrialPoint]:
        """The trials of this run's spec, queued ones too: the only ones it scores against and
        counts toward its budget, even once another worker's `--accept-changes` has made
        another spec the study's current one (issue 24, item 3)."""
        read = self.read()
        return read.current() if self.spec_id is None else read.of_spec(self.spec_id)

    def waiting(self) -> list[TrialPoint]:
        """This spec's queued trials (a baseline, a retry, a warm start, a `--confirm`), oldest
        first: the only queued work this run takes (another spec's stays WAITING, and so does
        a re-run queued by a judging since changed: `stale_queue`)."""
        mine = (p for p in self.points() if p.state == "WAITING" and not p.stale_queue)
        return sorted(mine, key=lambda p: p.number)


def budget_used(points: list[TrialPoint], *, real_only: bool = False) -> tuple[int, int]:
    """(trials done, trials in flight): what `n_trials` counts. Interrupted trials and reused
    results are not counted (a re-run finishes the plan); a trial in flight may still turn
    out a reused result. Nor are `--confirm`'s re-runs: they measure a config again, not a
    new one (they used to count, so a study confirmed once ran fewer configs than its budget
    when the budget was raised or a killed confirmation was resumed). `real_only`
    (multi-fidelity, whose budget is its few real trials): nor launches ruled out on a
    prediction (issue 37 §4). Nor, ever, configs vLLM's rules refuse before launch: they
    cost nothing, and a space where many are refused used to spend up to half its budget
    on them (issue 34). Nor a trial the box ended (`BOX_FAULTS`, told as nothing)."""
    done = running = 0
    for p in points:
        if p.confirm_of is not None:
            continue
        if p.state == "RUNNING":
            running += 1
        elif p.state == "WAITING":
            continue  # queued (a retry, a baseline): counted once it runs
        elif p.state == "FAIL" and p.failure_kind in BOX_FAULTS:
            continue  # the box's state (a busy GPU, a GPU fault), never told as the config's
        elif not p.interrupted and p.record.reused_from is None and not p.refused_by_rules:
            done += not (real_only and p.record.ruled_out)
    return done, running


def has_baseline(points: list[TrialPoint], host: str | None, *, running: bool = False) -> bool:
    """Whether this host's baseline ended (measured, or truly failed: an interrupted one is
    not a baseline, `TrialPoint.baseline`); with `running`, also one in flight."""
    return any(
        p.baseline
        and p.host == host
        and p.state != "WAITING"
        and (running or p.status != "running")
        for p in points
    )


def nothing_starts(points: list[TrialPoint], enough: int) -> str | None:
    """When the first launches all failed at start the same way and no engine ever started
    (every further trial would too): why, from the engine's log. None otherwise."""
    if any(p.measured or p.record.startup_s is not None for p in points):
        return None
    causes = [
        (p.failure_kind, re.sub(r"\d+", "N", p.record.failure_reason or ""))
        for p in points
        if p.status == "failed"
        and not p.record.predicted
        and p.failure_kind not in CONFIG_FAILURES
        and not p.interrupted
        and p.record.reused_from is None
    ]
    if len(causes) < enough or len(set(causes)) != 1:
        return None
    last = max((p for p in points if p.status == "failed"), key=lambda p: p.number)
    return (
        f"the first {len(causes)} engine starts all failed the same way and none "
        f"ever started, so the study stops: {last.failure} (log: {last.record.log_path})"
    )
