"""The study loop: budget, signals, recovery, and asking and telling Optuna.

One trial is `tuner.run.pipeline`'s job; this loop asks Optuna for parameters, hands them to the
pipeline, and tells Optuna the `Outcome`, writing through `tuner.trial`'s encoders. Every path
out of a trial (measured, refused, crashed, Ctrl-C) ends it in storage: nothing is left RUNNING,
no engine is left alive. The loop never asks whether the engine is simulated. One loop is one
worker (`tuner.run.lock.Worker`); several (processes, hosts on PostgreSQL, GPU slots' threads)
share one study, its budget, one claim per config and each host's baseline (docs/scale-out.md).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import optuna

from tuner import trial as tr
from tuner.errors import UserError
from tuner.run import rejudge
from tuner.run.lock import ConfigClaim, StudyLock, Worker, config_key, takes_lock
from tuner.run.outcome import Outcome, TrialInput
from tuner.run.pipeline import TrialPipeline
from tuner.run.progress import StudyProgress
from tuner.run.reading import (
    StudyReading,
    ask,
    budget_used,
    has_baseline,
    nothing_starts,
    queue_warm_starts,
)
from tuner.run.recovery import stale_after_s
from tuner.run.sampling import make_sampler, suggest
from tuner.run.signals import Interrupted, ended_by, stopping
from tuner.run.summary import RunSummary, Streaks, in_budget
from tuner.runners.trial_runner import TrialRunner
from tuner.spec.space import baseline_params, distributions
from tuner.spec.study import StudySpec
from tuner.spec.values import Params
from tuner.store import optuna_adapter as adapter
from tuner.store.storage import Store
from tuner.trial import TrialPoint, TrialRecord, specs
from tuner.trial.reading import trial_count
from tuner.trial.specs import study_name
from tuner.trial.uptime import launch_recorder

# This many launches failing at start the same way, before any engine ever started: the study
# itself is broken (a model path typo, a missing tokenizer), not the configs.
START_FAILURES_TO_STOP = 3
# Each further worker's sampler is seeded this far from the first's, so that workers started
# together do not propose the same configs (a prime: never a multiple of a trial count).
WORKER_SEED_STRIDE = 7919
# A worker whose budget is all taken by other workers' trials in flight waits this long
# between looks: a trial in flight may turn out a reused result, which counts nothing.
BUDGET_POLL_S = 0.5


class StudyLoop:
    """One invocation of `tuner run` / `tuner plan` over one stored study."""

    def __init__(
        self,
        spec: StudySpec,
        store: Store,
        runner: TrialRunner,
        *,
        precheck: bool = True,
        progress: StudyProgress | None = None,
        accept_changes: bool = False,
        pruning: bool = True,
        prediction_skip: bool = True,
        slot: str | None = None,
        warm_start: list[tuple[str, Params]] | None = None,
        say: Callable[[str], None] = lambda text: None,
    ) -> None:
        """`slot`: this worker's GPUs, one of several in this process (`tuner.run.slots` holds
        the lock). `warm_start`: (source, params) queued first. `say`: one line to the user."""
        self.spec, self.store, self.runner, self.say = spec, store, runner, say
        self.progress = progress or StudyProgress()
        self.name = study_name(spec, runner.planned)
        told = runner.objective.directions()  # Optuna's values, by name
        self.study = store.create_study(
            spec,
            self.name,
            make_sampler(spec),
            list(told.values()),
            list(told),
            simulated=runner.planned,
        )
        # Checked now (one line before anything runs), stored only under the study's lock.
        self.spec_id = specs.check(self.study, spec, accept_changes=accept_changes)
        self.reading = StudyReading(self.study, self.spec_id)  # this spec's trials only
        self._accept_changes, self.judging = accept_changes, specs.judging_id(spec)
        self.study.sampler = make_sampler(spec, offset=trial_count(self.study))
        self.pipeline = TrialPipeline(
            spec, store, runner, precheck=precheck, pruning=pruning, prediction_skip=prediction_skip
        )
        self.summary = RunSummary(self.name)
        self._dists = distributions(spec.search_space)
        self.worker = Worker(store, self.name, slot=slot)
        self.worker.watchdog = self.recover
        self.claims = ConfigClaim(store, self.name, self.worker.id)
        self.host = self.worker.host_id
        self.in_slots = slot is not None
        self.stop_event = threading.Event()  # set by `tuner.run.slots` on Ctrl-C
        self.stop_signal: int = signal.SIGINT
        self._warm_start = warm_start or []
        # `search.fidelity: multi`: the calibrated simulator chooses each real trial (a plan
        # is the simulator already: it never screens itself; nor does a model it does not know)
        self.screen = None
        if spec.search.fidelity == "multi" and not runner.planned:
            from tuner.fidelity.screen import make_screen

            self.screen = make_screen(spec, runner.requests, seed=spec.sampler.seed or 0)

    def points(self) -> list[TrialPoint]:
        """This spec's trials, read now: the only ones this run compares."""
        self.reading.refresh()
        return self.reading.points()

    def _points(self) -> list[TrialPoint]:
        """The same, read once between two of the loop's writes (`tuner.run.reading`, through
        which they go) or `refresh`es."""
        return self.reading.points()

    # Recovery ------------------------------------------------------------------------------

    def recover(self) -> None:
        """End a dead tuner's engines and RUNNING trials (also the heartbeat's watchdog)."""
        done = self.reading.recover(self.store, retry=self.spec.trial.retry_interrupted)
        self.summary.interrupted_recovered += done.interrupted
        self.summary.orphans_stopped += done.orphans_stopped

    # Budget --------------------------------------------------------------------------------

    def budget_used(self) -> tuple[int, int]:
        """(trials done, trials in flight) of this spec by every worker (`reading.budget_used`;
        multi-fidelity counts real trials: a launch ruled out on a prediction is not one)."""
        return budget_used(self._points(), real_only=self.screen is not None)

    def trials_left(self, n_trials: int | None) -> int:
        """`n_trials` more (this worker's), else what the study file's budget still allows."""
        if n_trials is not None:
            return n_trials
        return max(self.spec.budget.n_trials - self.budget_used()[0], 0)

    def _budget_met(self, n_trials: int | None, new: int) -> bool:
        """Whether to stop: with `--n-trials`, this worker's own count; else the study's,
        waiting while the rest of the budget is in other workers' hands. Two workers that look
        at the same instant may both start the last trial: the overshoot is at most the
        trials in flight (docs/scale-out.md, "Budget")."""
        if n_trials is not None:
            return new >= n_trials
        while True:
            done, running = self.budget_used()
            if done >= self.spec.budget.n_trials:
                return True
            if done + running < self.spec.budget.n_trials:
                return False
            self._poll()

    def _poll(self) -> None:
        """Wait a moment for other workers, then read the study afresh."""
        if self.stop_event.wait(BUDGET_POLL_S):
            raise Interrupted(self.stop_signal)
        self.reading.refresh()

    def time_used_s(self) -> float:
        """Wall time of this spec's finished trials: what `budget.timeout` counts."""
        return sum(p.duration_s or 0.0 for p in self._points())

    # The loop ------------------------------------------------------------------------------

    def run(
        self, *, n_trials: int | None = None, timeout_s: float | None = None, confirm: int = 0
    ) -> RunSummary:
        """Trials up to the budget (or `n_trials` more); then re-measure the best `confirm`.

        On SQLite the study's lock comes first (before recovery, which must never judge a
        live run's trial); GPU slots hold it for all their loops (`tuner.run.slots`)."""
        with contextlib.ExitStack() as stack:
            if takes_lock(self.store) and not self.in_slots:
                stack.enter_context(StudyLock(self.store, self.name))
            stack.enter_context(self.worker)
            self.spec_id, rejudged = rejudge.bind(self.study, self.spec, self._accept_changes)
            self.reading.bind(self.spec_id)
            rejudge.requeue(self._points, self.spec, rejudged, self.say, self._enqueue)
            rank = self.worker.rank()
            if rank:  # not alone on the study: a sampler stream of its own
                offset = trial_count(self.study) + WORKER_SEED_STRIDE * rank
                self.study.sampler = make_sampler(self.spec, offset=offset)
            return self._run(n_trials=n_trials, timeout_s=timeout_s, confirm=confirm)

    def _wait_for_baseline(self) -> None:
        """Another worker of this host is measuring its baseline: scores need it, so wait."""
        while self._has_baseline(running=True) and not self._has_baseline():
            self.progress.phase("waiting for this host's baseline")
            self._poll()

    def _run(self, *, n_trials: int | None, timeout_s: float | None, confirm: int) -> RunSummary:
        self.recover()
        if self._warm_start:  # after the baseline: `ask` takes the oldest waiting trial
            self._ensure_baseline()
        queue_warm_starts(self._points, self._warm_start, self.host, self.say, self._enqueue)
        todo = self.trials_left(n_trials)  # the baseline is queued before each ask
        budget_s = self.spec.budget.timeout_s
        t0 = time.monotonic()
        with self._session(todo + confirm * self.spec.trial.confirm_repeats):
            new, streaks = 0, Streaks(multi_fidelity=self.screen is not None)
            while not self._budget_met(n_trials, new):
                if timeout_s is not None and time.monotonic() - t0 >= timeout_s:
                    break
                if n_trials is None and budget_s is not None and self.time_used_s() >= budget_s:
                    break
                counted = streaks.counts(self._one_trial(new), self.summary)
                if counted is None:
                    break
                new += counted
            if confirm:
                self._confirm(confirm, first_index=new)
        return self.summary

    def _has_baseline(self, *, running: bool = False) -> bool:
        """Whether this host's baseline of this spec ended (or, with `running`, is in flight)."""
        return has_baseline(self._points(), self.host, running=running)

    def _enqueue(self, params: Params, record: TrialRecord) -> None:
        """Queue a trial of this spec: only a run of this spec takes it (`_ask`)."""
        self.reading.enqueue(params, replace(record, spec_id=self.spec_id))

    def _ensure_baseline(self) -> None:
        """Until vLLM's defaults are measured under this spec on this host, they are its next
        trial: an interrupted baseline is queued again (a baseline that truly failed is not)."""
        base = baseline_params(self.spec.search_space)
        if base is None or self._has_baseline(running=True):
            return
        if any(p.queued_baseline_for(self.spec_id, self.host) for p in self.reading.waiting()):
            return
        self._enqueue(base, TrialRecord(baseline=True, spec_id=self.spec_id, host=self.host))

    def _confirm(self, k: int, first_index: int) -> None:
        """Re-measure the best k configs; rankings then use the mean over all their runs."""
        top = tr.ranked(self._points())[:k]
        repeats = self.spec.trial.confirm_repeats
        for p in top:
            for _ in range(repeats):
                self._enqueue(p.params, TrialRecord(confirm_of=p.number))
        for i in range(len(self.reading.waiting())):  # a stopped confirmation's re-runs too
            self.reading.refresh()
            if not any(q.confirm_of is not None for q in self.reading.waiting()):
                break
            self._one_trial(first_index + i)

    @contextlib.contextmanager
    def _session(self, total: int) -> Iterator[None]:
        """Progress display and signal handling around a run; the engine is always stopped.
        The first Ctrl-C, SIGTERM or SIGHUP ends the current trial as interrupted, then the
        run exits; a second one kills the engine's process group at once (the trial is still
        marked)."""
        self.progress.start(total)
        try:
            with stopping(self.runner.kill):
                yield
        finally:
            self.progress.stop()
            self.runner.close()

    # One trial -----------------------------------------------------------------------------

    def _one_trial(self, index: int) -> Outcome:
        """One trial. The study is read twice: as it stands when the trial starts (what the
        baseline checks and the pipeline see) and once it is told (the progress line, and the
        next trial's budget check); reads in between are answered from those."""
        self.reading.refresh()  # other workers may have written since this loop last read
        self._ensure_baseline()  # an interrupted one, or one another host's worker took
        self._wait_for_baseline()
        if self.screen is not None:  # after the baseline: `ask` takes the oldest waiting trial
            self._enqueue_screened()
        # Asked without distributions: a sampler's exception cannot leave the trial RUNNING.
        waiting = self.reading.waiting()
        trial = ask(self.study, waiting)  # this spec's queued work, or new
        try:
            adapter.set_system_attr(self.study, trial, tr.OWNER, self.worker.owner)
            queued = tr.record_of(trial)  # what enqueue_trial attached, if anything
            # Another host's queued baseline, taken by this worker (`ask` takes the oldest
            # waiting trial): this host's own, if it has none yet; else an ordinary trial.
            baseline = queued.queued_baseline_for(self.spec_id) and not self._has_baseline(
                running=queued.host != self.host
            )
            tr.write(trial, TrialRecord(host=self.host, spec_id=self.spec_id))
            params = {name: suggest(trial, name, d) for name, d in self._dists.items()}
            self.progress.trial(index, trial.number, params)
            key = config_key(params, self.host if baseline else None)
            with self.claims.hold(key, trial.number, lambda: self._waiting_for_claim()):
                if baseline and self._has_baseline():  # this host's was measured meanwhile
                    baseline = False
                if queued.baseline and not baseline:  # not ours: an ordinary trial
                    tr.write(trial, TrialRecord(baseline=False))
                outcome = self.pipeline.evaluate(
                    TrialInput(
                        self.name,
                        trial.number,
                        params,
                        self._points(),
                        confirm_of=queued.confirm_of,
                        baseline=baseline,
                        queued=any(p.number == trial.number for p in waiting),
                        host=self.host,
                        phase=self.progress.phase,
                        on_launch=launch_recorder(trial),
                    )
                )
                if self.stop_event.is_set():  # Ctrl-C reached another slot's thread
                    raise Interrupted(self.stop_signal)
                self._tell(trial, outcome)
        except optuna.exceptions.UpdateFinishedTrialError:
            # Cut off from the study past the stale threshold: a survivor ended this trial.
            self.runner.close()
            raise UserError(
                f"trial {trial.number} was ended as interrupted by another worker while this "
                "one was cut off from the study (no heartbeat for longer than "
                f"{stale_after_s():g} s): start this worker again"
            ) from None
        except BaseException as exc:
            self._abandon(trial, exc)
            raise
        self.summary.count(trial.number, outcome)
        points = self._points()
        best = tr.best(points)
        counted = in_budget(outcome, multi_fidelity=self.screen is not None)
        self.progress.done(trial.number, outcome, best.score if best else None, counted=counted)
        if outcome.stop_study:
            raise UserError(outcome.stop_study)
        broken = nothing_starts(points, START_FAILURES_TO_STOP)
        if broken is not None:
            raise UserError(broken)
        return outcome

    def _waiting_for_claim(self) -> None:
        """Another worker measures this config: what it finds is read once it is done."""
        self.progress.phase("waiting")
        self.reading.refresh()

    def _enqueue_screened(self) -> None:
        """Queue the screen's choice, unless a trial (baseline, warm start, confirm) waits."""
        assert self.screen is not None
        if self.reading.waiting():
            return
        self.progress.phase("screening on the simulator")
        choice = self.screen.choose(self._points(), host=self.host)
        tr.write_calibration(self.study, self.screen.calibration_record())
        if choice is not None:  # None: nothing new would start; the sampler proposes
            self._enqueue(choice.params, choice.record)

    def _tell(self, trial: optuna.Trial, outcome: Outcome) -> None:
        """End the trial COMPLETE with its constraints; FAIL when it has no values to give."""
        record = replace(outcome.record, judging_id=self.judging)  # what it was judged under
        if outcome.kind == "measured":  # a partial (pruned) run says nothing of the screen
            record = record.judging(tr.record_of(trial), outcome.metrics)
        tr.write(trial, record)
        legacy = tr.write_constraints(trial, outcome.constraints)
        adapter.set_system_attr(self.study, trial, tr.LEGACY_CONSTRAINTS, legacy)
        if outcome.record.simulated:
            # A study that measured the simulated engine is labelled simulated, trial and study.
            self.reading.mark_simulated()
        if outcome.record.pruned_reason is not None:  # stopped early (or its reuse): PRUNED
            bound = outcome.record.pruned_score_bound  # "cannot beat": scalar mode, one value
            if bound is not None and len(self.study.directions) == 1:
                trial.report(bound, 0)  # what TPE ranks a PRUNED trial by (its censored score)
            self.reading.tell(trial, state=optuna.trial.TrialState.PRUNED)
        elif outcome.values is None:
            self.reading.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            self.reading.tell(trial, outcome.values)

    def _abandon(self, trial: optuna.Trial, exc: BaseException) -> None:
        """Ctrl-C or a bug mid-trial: stop the engine, end the trial as FAIL with the reason."""
        self.runner.close()
        if adapter.is_finished(self.study, trial):
            return  # already recorded
        tr.write(trial, ended_by(exc, trial))  # the engine was just stopped
        self.store.delete_trial(self.name, trial.number)
        self.reading.tell(trial, state=optuna.trial.TrialState.FAIL)
