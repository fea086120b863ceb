"""The trial loop: ask Optuna, check vLLM's rules, measure, score, store, tell.

Every path out of a trial (measured, refused, crashed, Ctrl-C) ends it in storage: nothing is
left RUNNING, no engine is left alive. The loop never asks whether the engine is simulated.
"""

from __future__ import annotations

import contextlib
import math
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import optuna

from tuner import objective as obj
from tuner.config import StudySpec
from tuner.errors import UserError
from tuner.progress import SilentProgress, StudyProgress
from tuner.recovery import INTERRUPTED, OWNER_ATTR, recover, this_process
from tuner.runner import Measurement, TrialContext, TrialRunner
from tuner.space import (
    baseline_params,
    check_rules,
    distributions,
    effective_flags,
    engine_env,
    max_model_len,
)
from tuner.store import Store

# Start-up refusals the memory precheck claims to predict.
_PREDICTABLE = ("kv_cache_too_small", "unsupported_block_size", "out_of_memory")
# An engine's words for a flag it does not know: argparse's (vLLM), click's (tuner sim serve).
_UNKNOWN_FLAG = re.compile(r"unrecognized arguments|No such option: --")
LEGACY_CONSTRAINTS_ATTR = "constraints"  # what optuna-dashboard reads to mark infeasible trials
FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)


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


def _key(params: dict[str, Any]) -> tuple:
    return tuple(sorted((k, round(v, 9) if isinstance(v, float) else v) for k, v in params.items()))


@dataclass
class RunSummary:
    study_name: str
    ran: int = 0
    interrupted_recovered: list[int] = field(default_factory=list)
    orphans_stopped: int = 0
    saved_by_rules: int = 0  # refused by vLLM's scheduler rules: never launched
    saved_by_precheck: int = 0  # predicted not to fit in memory / not supported
    saved_by_reuse: int = 0  # parameters already measured: result reused

    @property
    def launches_saved(self) -> int:
        return self.saved_by_rules + self.saved_by_precheck + self.saved_by_reuse

    precheck_wrong: list[int] = field(default_factory=list)


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
        self.precheck = precheck
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
        self.summary = RunSummary(self.name)
        self._dists = distributions(spec.search_space)
        self._current: optuna.Trial | None = None

    # Recovery ------------------------------------------------------------------------------

    def recover(self) -> None:
        """Stop engines a dead tuner left behind; end its RUNNING trials as interrupted."""
        done = recover(self.study, self.store, retry=self.spec.trial.retry_interrupted)
        self.summary.interrupted_recovered += done.interrupted
        self.summary.orphans_stopped += done.orphans_stopped

    @property
    def _storage(self) -> optuna.storages.BaseStorage:
        return self.study._storage

    # Budget --------------------------------------------------------------------------------

    def trials_left(self, n_trials: int | None) -> int:
        """`n_trials` more, else what the study file's budget still allows. Trials that a
        crash or Ctrl-C interrupted do not use up the budget: a re-run finishes the plan."""
        if n_trials is not None:
            return n_trials
        done = sum(
            1
            for t in self.study.get_trials(deepcopy=False)
            if t.state in FINISHED and t.user_attrs.get("failure_kind") != INTERRUPTED
        )
        return max(self.spec.budget.n_trials - done, 0)

    def time_used_s(self) -> float:
        total = 0.0
        for t in self.study.get_trials(deepcopy=False):
            if t.datetime_start and t.datetime_complete:
                total += (t.datetime_complete - t.datetime_start).total_seconds()
        return total

    # The loop ------------------------------------------------------------------------------

    def run(
        self, n_trials: int | None = None, timeout_s: float | None = None, confirm: int = 0
    ) -> RunSummary:
        """Trials up to the budget (or `n_trials` more); then re-measure the best `confirm`."""
        self.recover()
        if not self.study.trials:
            base = baseline_params(self.spec.search_space)
            if base is not None:
                self.study.enqueue_trial(base, user_attrs={"baseline": True})
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
                self.summary.ran += 1
            if confirm:
                self._confirm(confirm, first_index=todo)
        return self.summary

    def _confirm(self, k: int, first_index: int) -> None:
        """Re-measure the best k configs; rankings then use the mean over all their runs."""
        from tuner.views import ranked_feasible

        top = ranked_feasible(self.study)[:k]
        for t in top:
            for _ in range(self.spec.trial.confirm_repeats):
                self.study.enqueue_trial(t.params, user_attrs={"confirm_of": t.number})
        for i in range(len(top) * self.spec.trial.confirm_repeats):
            self._one_trial(first_index + i)
            self.summary.ran += 1

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

    def _one_trial(self, index: int) -> None:
        trial = self.study.ask(self._dists)
        self._current = trial
        self._storage.set_trial_system_attr(trial._trial_id, OWNER_ATTR, this_process())
        params = trial.params
        self.progress.trial(index, trial.number, params)
        try:
            summary = self._evaluate(trial, params)
        except BaseException as exc:
            self._abandon(trial, exc)
            raise
        finally:
            self._current = None
        self.progress.done(trial.number, summary, self._best_score())

    def _abandon(self, trial: optuna.Trial, exc: BaseException) -> None:
        """Ctrl-C or a bug mid-trial: stop the engine, end the trial as FAIL with the reason."""
        self.runner.close()
        if self._storage.get_trial(trial._trial_id).state.is_finished():
            return  # already recorded (e.g. a refusal that stops the whole study)
        reason = "interrupted by the user" if isinstance(exc, KeyboardInterrupt) else repr(exc)
        trial.set_user_attr("failure_kind", INTERRUPTED)
        trial.set_user_attr("failure_reason", reason[:500])
        self.store.delete_trial(self.name, trial.number)
        self.study.tell(trial, state=optuna.trial.TrialState.FAIL)

    def _evaluate(self, trial: optuna.Trial, params: dict[str, Any]) -> str:
        if not self.spec.trial.repeat_measured and "confirm_of" not in trial.user_attrs:
            prev = self._measured_before(params, trial.number)
            if prev is not None:
                return self._reuse(trial, prev)
        flags = effective_flags(self.spec, params)
        refusal = check_rules(flags, max_model_len(self.spec))
        if refusal is not None:
            self.summary.saved_by_rules += 1
            return self._infeasible(trial, "invalid_argument", refusal, predicted=True)
        predicted = self._predict_refusal(flags, params)
        if predicted is not None and self.precheck:
            self.summary.saved_by_precheck += 1
            return self._infeasible(trial, predicted[0], predicted[1], predicted=True)
        ctx = TrialContext(
            self.name,
            trial.number,
            params,
            self.progress.phase,
            on_engine_started=lambda ident, log: self.store.engine_started(
                self.name, trial.number, ident, log
            ),
            on_engine_stopped=lambda: self.store.engine_stopped(self.name, trial.number),
        )
        m = self.runner.measure(ctx)
        self._check_prediction(trial, predicted, m)
        if m.metrics is None:
            return self._failed(trial, m)
        return self._complete(trial, m)

    def _check_prediction(
        self, trial: optuna.Trial, predicted: tuple[str, str] | None, m: Measurement
    ) -> None:
        """Hold the memory precheck to what the engine really did; keep the misses."""
        refused = m.failure_kind in _PREDICTABLE and m.startup_s is None
        if predicted is None and not refused:
            return  # predicted to start, and it did
        if predicted is not None and refused and predicted[0] == m.failure_kind:
            return  # predicted the very refusal (only seen with --no-precheck)
        said = f"predicted {predicted[0]}" if predicted else "predicted to start"
        did = f"engine {m.failure_kind}" if refused else "engine started"
        trial.set_user_attr("precheck_wrong", f"{said}; {did}")
        self.summary.precheck_wrong.append(trial.number)

    def _predict_refusal(
        self, flags: dict[str, Any], params: dict[str, Any]
    ) -> tuple[str, str] | None:
        from tuner.precheck import predict_refusal

        env = engine_env(self.spec, params)
        return predict_refusal(self.spec.engine.model, self.spec.hardware, flags, env)

    # Ending a trial -------------------------------------------------------------------------

    def _tell(
        self,
        trial: optuna.Trial,
        values: list[float] | None,
        cons: dict[str, float],
        attrs: dict[str, Any],
    ) -> None:
        """End the trial COMPLETE with its constraints; FAIL when it has no values to give."""
        for k, v in attrs.items():
            trial.set_user_attr(k, v)
        for k, v in cons.items():
            trial.set_constraint(k, v)
        self._storage.set_trial_system_attr(
            trial._trial_id, LEGACY_CONSTRAINTS_ATTR, list(cons.values())
        )
        if values is None:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(trial, values)

    def _penalty(self) -> list[float] | None:
        measured = [t.user_attrs for t in self._measured()]
        return obj.penalty_values(self.spec.objective, measured)

    def _infeasible(self, trial: optuna.Trial, kind: str, reason: str, *, predicted: bool) -> str:
        self.store.save_trial(
            self.name,
            trial.number,
            "predicted_infeasible" if predicted else "failed",
            result={"failure_kind": kind, "reason": reason},
        )
        attrs = {
            "failure_kind": kind,
            "failure_reason": reason,
            "predicted": predicted,
            "simulated": self.runner.simulated,
        }
        self._tell(trial, self._penalty(), obj.constraints(self.spec.objective, None), attrs)
        return f"[yellow]not launched[/yellow] ({kind}): {reason[:160]}"

    def _save(self, trial: optuna.Trial, outcome: str, m: Measurement, result: dict) -> None:
        """The trial's row and request records (one transaction), before Optuna is told."""
        self.store.save_trial(
            self.name,
            trial.number,
            outcome,
            argv=m.argv,
            env=m.env,
            vllm_version=m.vllm_version,
            log_path=m.log_path,
            startup_s=m.startup_s,
            workload_s=m.workload_s,
            result=result,
            records=m.records,
        )

    def _failed(self, trial: optuna.Trial, m: Measurement) -> str:
        result = {"failure_kind": m.failure_kind, "reason": m.failure_reason}
        self._save(trial, "failed", m, {**result, "log_tail": m.log_tail})
        attrs = {
            "failure_kind": m.failure_kind,
            "failure_reason": m.failure_reason,
            "log_path": m.log_path,
            "simulated": self._simulated(m),
            "predicted": False,
        }
        if m.vllm_version:
            attrs["vllm_version"] = m.vllm_version
        self._tell(trial, self._penalty(), obj.constraints(self.spec.objective, None), attrs)
        if m.failure_kind == "invalid_argument" and _UNKNOWN_FLAG.search(m.failure_reason or ""):
            # No tuned value can fix a flag the engine does not know: every trial would fail.
            raise UserError(f"the engine does not accept its command line: {m.failure_reason}")
        return f"[red]failed[/red] ({m.failure_kind}): {(m.failure_reason or '')[:160]}"

    def _complete(self, trial: optuna.Trial, m: Measurement) -> str:
        assert m.metrics is not None
        metrics = m.metrics
        reference = self._reference_metrics() or metrics
        total = metrics.get("completed", 0) + metrics.get("failed", 0)
        failed_fraction = metrics.get("failed", 0) / total if total else 1.0
        cons = obj.constraints(self.spec.objective, metrics, failed_fraction=failed_fraction)
        score = obj.score(metrics, reference, self.spec.objective.weights)
        attrs: dict[str, Any] = {
            k: float(v)
            for k, v in metrics.items()
            if isinstance(v, int | float) and math.isfinite(v)
        }
        attrs.update({f"{k}_ci": [float(lo), float(hi)] for k, (lo, hi) in m.ci.items()})
        attrs.update(
            score=score,
            simulated=self._simulated(m),
            vllm_version=m.vllm_version or "unknown",
            log_path=m.log_path,
            startup_s=m.startup_s,
            workload_s=m.workload_s,
            slo_met=all(
                v <= 0 for k, v in cons.items() if k not in ("measured", "failed_requests")
            ),
        )
        if trial.number == self._first_trial_number():
            attrs["baseline"] = True
        values = obj.objective_values(self.spec.objective, metrics, reference)
        self._save(trial, "measured", m, {**metrics, "score": score})
        self._tell(trial, values, cons, attrs)
        feasible = all(v <= 0 for v in cons.values())
        tag = "" if feasible else " [yellow](breaks a constraint)[/yellow]"
        return (
            f"score {score:+.3f}  p99 TTFT {metrics.get('p99_ttft_ms', float('nan')):.1f} ms"
            f"  mean TPOT {metrics.get('mean_tpot_ms', float('nan')):.2f} ms"
            f"  {metrics.get('output_throughput', float('nan')):.1f} tok/s{tag}"
        )

    def _reuse(self, trial: optuna.Trial, prev: optuna.trial.FrozenTrial) -> str:
        attrs = {k: v for k, v in prev.user_attrs.items() if k != "baseline"}
        attrs["reused_from"] = prev.number
        self.summary.saved_by_reuse += 1
        named = {k: v for k, v in prev.constraints.items() if not k.isdigit()}
        self._tell(trial, list(prev.values), named, attrs)
        return f"same parameters as trial {prev.number}: result reused, not launched"

    def _simulated(self, m: Measurement) -> bool:
        """A study that measured the simulated engine is labelled simulated, trial and study."""
        if m.simulated and not self.study.user_attrs.get("simulated"):
            self.study.set_user_attr("simulated", True)
        return m.simulated or self.runner.simulated

    # Lookups --------------------------------------------------------------------------------

    def _completed(self) -> list[optuna.trial.FrozenTrial]:
        return self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))

    def _measured_before(self, params: dict[str, Any], number: int):
        key = _key(params)
        for t in self._completed():
            if t.number != number and _key(t.params) == key:
                return t
        return None

    def _first_trial_number(self) -> int:
        return min(t.number for t in self.study.get_trials(deepcopy=False))

    def _measured(self) -> list[optuna.trial.FrozenTrial]:
        """Completed trials with a measurement of their own (not refused, not reused)."""
        return [
            t
            for t in self._completed()
            if "failure_kind" not in t.user_attrs and "reused_from" not in t.user_attrs
        ]

    def _reference_metrics(self) -> dict[str, float] | None:
        """The baseline's metrics: trial 0 if it was measured, else the first measured trial."""
        measured = self._measured()
        if not measured:
            return None
        ref = min(measured, key=lambda t: (not t.user_attrs.get("baseline"), t.number))
        return ref.user_attrs

    def _best_score(self) -> float | None:
        scores = [
            t.user_attrs["score"]
            for t in self._completed()
            if "score" in t.user_attrs and all(v <= 0 for v in t.constraints.values())
        ]
        return min(scores) if scores else None


def _install_sigint(handler: Any) -> Any:
    if handler is None:
        return None
    try:
        return signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: leave Python's default
        return None
