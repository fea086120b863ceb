"""Two specs in one PostgreSQL study (issue 24, items 3 and 4), end to end on the simulated engine.

A worker whose spec another worker's `--accept-changes` replaced goes on under its own spec:
it scores against its own baseline and counts its own budget. Queued work (a `--confirm`
re-run, a retry) belongs to the spec that queued it: a run of another spec never takes it.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tuner import trial as tr
from tuner_testing import counted, sim_study, start_workers, tuner
from tuner_testing.inprocess import tuner_in_process
from tuner_testing.waiting import wait_for

pytestmark = pytest.mark.slow  # whole studies: `make test`, not `make test-fast`

FAST = {"TUNER_HEARTBEAT_S": "0.5"}
WORKER_TIMEOUT_S = 240
WAITING = optuna.trial.TrialState.WAITING


def _study(tmp_path: Path, tiny_model_dir: Path, where: str, **kw) -> Path:
    folder = tmp_path / where
    folder.mkdir()
    return sim_study(folder, tiny_model_dir, **kw)


def _trials(url: str) -> list[optuna.trial.FrozenTrial]:
    try:
        return optuna.load_study(study_name="e2e", storage=url).get_trials()
    except KeyError:  # not created yet
        return []


def _by_spec(trials: list[optuna.trial.FrozenTrial]) -> dict[str, list[optuna.trial.FrozenTrial]]:
    out: dict[str, list[optuna.trial.FrozenTrial]] = {}
    for t in trials:
        out.setdefault(t.user_attrs.get(tr.SPEC_OF), []).append(t)
    return out


def _assert_scored_within_their_spec(trials: list[optuna.trial.FrozenTrial]) -> None:
    by_number = {t.number: t for t in trials}
    for t in trials:
        ref = t.user_attrs.get(tr.REFERENCE)
        if ref is not None:
            spec = by_number[ref].user_attrs.get(tr.SPEC_OF)
            assert spec == t.user_attrs.get(tr.SPEC_OF), (t.number, ref, t.user_attrs)


def test_a_worker_outlived_by_accept_changes_scores_and_counts_its_own_spec(
    postgres, tiny_model_dir: Path, tmp_path: Path
) -> None:
    url = postgres.new_database()
    n_a, n_b = 7, 2
    slow = {"num_prompts": 160, "request_rate": 16}  # ~10 s of workload (2.5 s at 4x)
    a = _study(tmp_path, tiny_model_dir, "a", budget={"n_trials": n_a}, workload=slow)
    edited = {**slow, "request_rate": 12}  # another measurement: another spec
    b = _study(tmp_path, tiny_model_dir, "b", budget={"n_trials": n_b}, workload=edited)
    (worker_a,) = start_workers(a, url, 1, tmp_path, env=FAST)

    def a_baseline() -> bool:
        return any(t.user_attrs.get(tr.BASELINE) and t.values for t in _trials(url))

    wait_for(a_baseline, "worker A's measured baseline", 120, proc=worker_a)
    worker_b = tuner("run", str(b), "--storage", url, "--accept-changes", cwd=tmp_path)
    assert worker_b.returncode == 0, worker_b.stderr
    _, err = worker_a.communicate(timeout=WORKER_TIMEOUT_S)
    assert worker_a.returncode == 0, err

    trials = _trials(url)
    specs = _by_spec(trials)
    assert len(specs) == 2, specs.keys()
    spec_a = trials[0].user_attrs[tr.SPEC_OF]
    (spec_b,) = set(specs) - {spec_a}
    b_base = next(t for t in specs[spec_b] if t.user_attrs.get(tr.BASELINE) and t.values)
    # The test means something only if A kept measuring once B's baseline was stored.
    assert any(t.datetime_start > b_base.datetime_complete for t in specs[spec_a])
    _assert_scored_within_their_spec(trials)
    assert counted(specs[spec_a]) == n_a  # alone on its spec: its budget exactly
    assert counted(specs[spec_b]) == n_b


@pytest.mark.parametrize("stamped", [True, False], ids=["queued-now", "queued-by-older-tuner"])
def test_queued_confirm_reruns_of_the_old_spec_are_not_taken_under_the_new(
    postgres, tiny_model_dir: Path, tmp_path: Path, stamped: bool
) -> None:
    """Two runs one after the other: what a run of the new spec takes from the queue is the
    loop's logic, so both run in this process on the simulation core
    (`tuner_testing.inprocess`), on PostgreSQL; the worker above is the processes' test."""
    url = postgres.new_database()
    old = _study(tmp_path, tiny_model_dir, "old", budget={"n_trials": 3})
    done = tuner_in_process("run", str(old), "--storage", url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # What a kill during `--confirm` leaves behind: the best config's re-runs, WAITING. An
    # older tuner queued them without a spec id.
    study = optuna.load_study(study_name="e2e", storage=url)
    first = study.get_trials()
    best = min((t for t in first if t.values and not t.user_attrs.get(tr.BASELINE)), key=_score)
    record = tr.TrialRecord(confirm_of=best.number)
    if stamped:
        record = tr.TrialRecord(confirm_of=best.number, spec_id=best.user_attrs[tr.SPEC_OF])
    for _ in range(2):
        study.enqueue_trial(best.params, user_attrs=record.encode())
    queued = {t.number for t in study.get_trials() if t.state == WAITING}

    new_space = {"max-num-seqs": {"type": "int", "low": 8, "high": 16, "log": True, "default": 16}}
    new = _study(
        tmp_path,
        tiny_model_dir,
        "new",
        budget={"n_trials": 3},
        search_space={"parameters": new_space},
    )
    again = tuner_in_process("run", str(new), "--storage", url, "--accept-changes", cwd=tmp_path)
    assert again.returncode == 0, again.stderr

    trials = {t.number: t for t in _trials(url)}
    assert all(trials[n].state == WAITING for n in queued)  # left to a run of their spec
    spec_new = trials[max(trials)].user_attrs[tr.SPEC_OF]
    mine = [t for t in trials.values() if t.user_attrs.get(tr.SPEC_OF) == spec_new]
    assert not [t.number for t in mine if t.user_attrs.get(tr.CONFIRM_OF) is not None]
    assert all(8 <= t.params["max-num-seqs"] <= 16 for t in mine)  # inside the new space
    base = next(t for t in mine if t.user_attrs.get(tr.BASELINE))
    assert base.values and base.user_attrs[tr.REFERENCE] == base.number
    assert all(t.user_attrs.get(tr.REFERENCE) in (None, base.number) for t in mine)
    _assert_scored_within_their_spec(list(trials.values()))


def _score(t: optuna.trial.FrozenTrial) -> float:
    return t.user_attrs.get(tr.SCORE, float("inf"))
