"""The study loop: budget, signals, recovery, and asking and telling Optuna.

One trial is `tuner.pipeline`'s job; this loop asks Optuna for parameters, hands them to the
pipeline, and tells Optuna the `Outcome`, writing through the names of `tuner.trials`. Every
path out of a trial (measured, refused, crashed, Ctrl-C) ends it in storage: nothing is left
RUNNING, no engine is left alive. The loop never asks whether the engine is simulated.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import optuna

from tuner import objective as obj
from tuner import optuna_adapter as adapter
from tuner import trials as tr
from tuner.config import StudySpec
from tuner.errors import UserError
from tuner.pipeline import Outcome, TrialInput, TrialPipeline
from tuner.progress import SilentProgress, StudyProgress
from tuner.recovery import recover, this_process
from tuner.runner import TrialRunner
from tuner.space import baseline_params, distributions
from tuner.store import Store
from tuner.trials import FailureKind, TrialPoint


def study_name(spec: StudySpec, simulated: bool) -> str:
    return f"{spec.name}-simulated" if simulated else spec.name


def make_sampler(spec: StudySpec) -> optuna.samplers.BaseSampler:
    """The study file's sampler. Optuna 5's samplers read trial constraints themselves, so
    infeasible and refused configs steer the search away instead of being forgotten."""
    seed, name = spec.sampler.seed, spec.sampler.name
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, deterministic_objective=False)
    return optuna.samplers.TPESampler(seed=seed)


@dataclass
class RunSummary:
    study_name: str
    ran: int = 0
    interrupted_recovered: list[int] = field(default_factory=list)
    orphans_stopped: int = 0
    saved_by_rules: int = 0  # refused by vLLM's scheduler rules: never launched
    saved_by_precheck: int = 0  # predicted not to fit in memory / not supported
    saved_by_reuse: int = 0  # parameters already measured: result reused
    precheck_wrong: list[int] = field(default_factory=list)

    @property
    def launches_saved(self) -> int:
        return self.saved_by_rules + self.saved_by_precheck + self.saved_by_reuse

    def count(self, number: int, outcome: Outcome) -> None:
        self.ran += 1
        if outcome.saved_by is not None:
            name = f"saved_by_{outcome.saved_by}"
            setattr(self, name, getattr(self, name) + 1)
        if tr.PRECHECK_WRONG in outcome.attrs and outcome.kind != "reused":
            self.precheck_wrong.append(number)


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
    ) -> None:
        self.spec, self.store, self.runner = spec, store, runner
        self.progress = progress or SilentProgress()
        self.name = study_name(spec, runner.simulated)
        self.study = store.create_study(
            spec,
            self.name,
            make_sampler(spec),
            obj.directions(spec.objective),
            obj.metric_names(spec.objective),
            simulated=runner.simulated,
        )
        self.pipeline = TrialPipeline(spec, store, runner, precheck=precheck)
        self.summary = RunSummary(self.name)
        self._dists = distributions(spec.search_space)
        self._interrupted = False

    def points(self) -> list[TrialPoint]:
        return tr.read_all(self.study.get_trials(deepcopy=False))

    # Recovery ------------------------------------------------------------------------------

    def recover(self) -> None:
        """Stop engines a dead tuner left behind; end its RUNNING trials as interrupted."""
        done = recover(self.study, self.store, retry=self.spec.trial.retry_interrupted)
        self.summary.interrupted_recovered += done.interrupted
        self.summary.orphans_stopped += done.orphans_stopped

    # Budget --------------------------------------------------------------------------------

    def trials_left(self, n_trials: int | None) -> int:
        """`n_trials` more, else what the study file's budget still allows. Trials that a
        crash or Ctrl-C interrupted do not use up the budget: a re-run finishes the plan."""
        if n_trials is not None:
            return n_trials
        done = sum(1 for p in self.points() if p.status != "running" and not p.interrupted)
        return max(self.spec.budget.n_trials - done, 0)

    def time_used_s(self) -> float:
        total = 0.0
        for t in self.study.get_trials(deepcopy=False):
            if t.datetime_start and t.datetime_complete:
                total += (t.datetime_complete - t.datetime_start).total_seconds()
        return total

    # The loop ------------------------------------------------------------------------------

    def run(
        self, *, n_trials: int | None = None, timeout_s: float | None = None, confirm: int = 0
    ) -> RunSummary:
        """Trials up to the budget (or `n_trials` more); then re-measure the best `confirm`."""
        self.recover()
        if not self.study.trials:
            base = baseline_params(self.spec.search_space)
            if base is not None:
                self.study.enqueue_trial(base, user_attrs={tr.BASELINE: True})
        todo = self.trials_left(n_trials)
        budget_s = self.spec.budget.timeout_s
        t0 = time.monotonic()
        with self._session(todo + confirm * self.spec.trial.confirm_repeats):
            for i in range(todo):
                if timeout_s is not None and time.monotonic() - t0 >= timeout_s:
                    break
                if n_trials is None and budget_s is not None and self.time_used_s() >= budget_s:
                    break
                self._one_trial(i)
            if confirm:
                self._confirm(confirm, first_index=todo)
        return self.summary

    def _confirm(self, k: int, first_index: int) -> None:
        """Re-measure the best k configs; rankings then use the mean over all their runs."""
        top = tr.ranked(self.points())[:k]
        repeats = self.spec.trial.confirm_repeats
        for p in top:
            for _ in range(repeats):
                self.study.enqueue_trial(p.params, user_attrs={tr.CONFIRM_OF: p.number})
        for i in range(len(top) * repeats):
            self._one_trial(first_index + i)

    @contextlib.contextmanager
    def _session(self, total: int) -> Iterator[None]:
        """Progress display and Ctrl-C handling around a run; the engine is always stopped."""
        self.progress.start(total)
        self._interrupted = False
        old_handler = _install_sigint(self._on_sigint)
        try:
            yield
        finally:
            # After a Ctrl-C the tuner is on its way out: later presses must not cut cleanup.
            _install_sigint(signal.SIG_IGN if self._interrupted else old_handler)
            self.progress.stop()
            self.runner.close()

    def _on_sigint(self, signum: int, frame: object) -> None:
        """First Ctrl-C: end the current trial cleanly, then exit. Second: kill the engine's
        process group at once; the trial is still marked before the tuner exits."""
        if self._interrupted:
            self.runner.kill()
            return
        self._interrupted = True
        raise KeyboardInterrupt

    # One trial -----------------------------------------------------------------------------

    def _one_trial(self, index: int) -> None:
        trial = self.study.ask(self._dists)
        adapter.set_system_attr(self.study, trial, tr.OWNER, this_process())
        self.progress.trial(index, trial.number, trial.params)
        try:
            outcome = self.pipeline.evaluate(
                TrialInput(
                    self.name,
                    trial.number,
                    trial.params,
                    self.points(),
                    confirm_of=trial.user_attrs.get(tr.CONFIRM_OF),
                    phase=self.progress.phase,
                )
            )
            self._tell(trial, outcome)
        except BaseException as exc:
            self._abandon(trial, exc)
            raise
        self.summary.count(trial.number, outcome)
        best = tr.best(self.points())
        self.progress.done(trial.number, outcome, best.score if best else None)
        if outcome.stop_study:
            raise UserError(outcome.stop_study)

    def _tell(self, trial: optuna.Trial, outcome: Outcome) -> None:
        """End the trial COMPLETE with its constraints; FAIL when it has no values to give."""
        for k, v in outcome.attrs.items():
            trial.set_user_attr(k, v)
        for k, v in outcome.constraints.items():
            trial.set_constraint(k, v)
        adapter.set_system_attr(
            self.study, trial, tr.LEGACY_CONSTRAINTS, list(outcome.constraints.values())
        )
        if outcome.attrs.get(tr.SIMULATED) and not self.study.user_attrs.get(tr.STUDY_SIMULATED):
            # A study that measured the simulated engine is labelled simulated, trial and study.
            self.study.set_user_attr(tr.STUDY_SIMULATED, True)
        if outcome.values is None:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(trial, outcome.values)

    def _abandon(self, trial: optuna.Trial, exc: BaseException) -> None:
        """Ctrl-C or a bug mid-trial: stop the engine, end the trial as FAIL with the reason."""
        self.runner.close()
        if adapter.is_finished(self.study, trial):
            return  # already recorded
        reason = "interrupted by the user" if isinstance(exc, KeyboardInterrupt) else repr(exc)
        trial.set_user_attr(tr.FAILURE_KIND, FailureKind.INTERRUPTED.value)
        trial.set_user_attr(tr.FAILURE_REASON, reason[:500])
        self.store.delete_trial(self.name, trial.number)
        self.study.tell(trial, state=optuna.trial.TrialState.FAIL)


def _install_sigint(handler: Any) -> Any:
    if handler is None:
        return None
    try:
        return signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: leave Python's default
        return None
