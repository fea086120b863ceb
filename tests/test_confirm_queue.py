"""`--confirm`'s re-runs are queued work of their spec, not budget (found by benchmarks/soak.py's
confirm phase): they never take a new config's place in `budget.n_trials`, and a `--confirm`
run also finishes the re-runs that a stopped confirmation left queued, leaving none WAITING.
The budget's and the queue's logic: `tuner run` in this process on the simulation core
(`tuner_testing.inprocess`), not on `tuner sim serve`."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import yaml

from tuner import trial as tr
from tuner_testing import sim_study
from tuner_testing.inprocess import tuner_in_process as tuner

pytestmark = pytest.mark.slow  # whole studies: `make test`, not `make test-fast`


def _study(tmp_path: Path, tokenizer: Path) -> Path:
    return sim_study(
        tmp_path,
        tokenizer,
        workload={"num_prompts": 8},
        budget={"n_trials": 2},
        trial={"stall_timeout_s": 5, "confirm_repeats": 1},
    )


def _points(tmp_path: Path) -> list[tr.TrialPoint]:
    url = f"sqlite:///{tmp_path}/tuner.db"
    return [tr.read(t) for t in optuna.load_study(study_name="e2e", storage=url).get_trials()]


def _run(study: Path, *args: str) -> None:
    # every sampled config launched (none ruled out on a prediction: tests/test_predict_skip.py)
    out = tuner("run", str(study), *args, "--no-prediction-skip", cwd=study.parent)
    assert out.returncode == 0, out.stdout + out.stderr


def test_confirm_reruns_are_finished_when_left_queued_and_never_use_the_budget(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    study = _study(tmp_path, tiny_model_dir)
    _run(study)
    # What a kill during `--confirm` leaves: a re-run of the best config, WAITING.
    best = min((p for p in _points(tmp_path) if p.score is not None), key=lambda p: p.score)
    stored = optuna.load_study(study_name="e2e", storage=f"sqlite:///{tmp_path}/tuner.db")
    left = tr.TrialRecord(confirm_of=best.number, spec_id=best.spec_id)
    stored.enqueue_trial(best.params, user_attrs=left.encode())
    _run(study, "--confirm", "1", "--no-confirm-flags")  # not the flags (test_smallest_change)
    points = _points(tmp_path)
    # `ask` took the left re-run first, and this run's own used to stay WAITING
    assert [p.number for p in points if p.state == "WAITING"] == []
    reruns = [p for p in points if p.confirm_of is not None]
    assert len(reruns) == 2 and all(p.state == "COMPLETE" for p in reruns)
    assert len([p for p in points if p.confirm_of is None]) == 2  # and no new config

    data = yaml.safe_load(study.read_text())
    data["budget"]["n_trials"] = 3  # the same spec, one more config
    study.write_text(yaml.safe_dump(data, sort_keys=False))
    _run(study)
    # the two re-runs used to count toward the budget: the raised one ran no new config
    assert len([p for p in _points(tmp_path) if p.confirm_of is None]) == 3
