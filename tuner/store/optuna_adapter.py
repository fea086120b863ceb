"""The one place that reaches past Optuna's public API, and why.

Optuna 5's public `Trial` has `set_user_attr` and `set_constraint` but no system attrs, and a
`FrozenTrial` read back from storage cannot be written to. The tuner needs both:
- two system attrs: the trial's owner (for recovery; not a user attr, so it stays out of the
  dashboard's tables) and the legacy `constraints` list, the only thing optuna-dashboard 0.21
  reads to grey an infeasible trial out (`set_constraint` writes `constraints:<key>`);
- a writable handle on another process's RUNNING trial, to end it as interrupted after that
  process died (`study.tell` then ends it through the public API);
- asking for a trial without taking just any WAITING one: `study.ask` takes the oldest queued
  trial of the study, whichever spec queued it; `take_waiting` and `new_trial` are its two
  halves (the same storage calls), so a run takes only its own spec's queued work.
Both need the storage and the trial's id, which Optuna keeps private.
"""

from __future__ import annotations

from typing import Any

import optuna


def set_system_attr(study: optuna.Study, trial: Any, key: str, value: Any) -> None:
    """Set a system attr on a trial (an `optuna.Trial` or a `FrozenTrial`)."""
    study._storage.set_trial_system_attr(trial._trial_id, key, value)


def writable(study: optuna.Study, frozen: optuna.trial.FrozenTrial) -> optuna.Trial:
    """A live handle on a stored RUNNING trial, whichever process asked for it."""
    return optuna.Trial(study, frozen._trial_id)


def is_finished(study: optuna.Study, trial: optuna.Trial) -> bool:
    """Whether the trial has already been told (its stored state, not the handle's)."""
    return study._storage.get_trial(trial._trial_id).state.is_finished()


def take_waiting(study: optuna.Study, number: int) -> optuna.Trial | None:
    """Take queued trial `number` as `ask` would (WAITING → RUNNING, atomic on PostgreSQL);
    None when another worker took or ended it first."""
    storage = study._storage
    trial_id = storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
    try:
        if not storage.set_trial_state_values(trial_id, state=optuna.trial.TrialState.RUNNING):
            return None
    except optuna.exceptions.UpdateFinishedTrialError:
        return None
    study._thread_local.cached_all_trials = None  # what `ask` does: the sampler reads afresh
    return optuna.Trial(study, trial_id)


def new_trial(study: optuna.Study) -> optuna.Trial:
    """A new RUNNING trial, as `ask` makes when nothing is queued."""
    study._thread_local.cached_all_trials = None
    return optuna.Trial(study, study._storage.create_new_trial(study._study_id))
