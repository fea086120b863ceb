"""The GPUs of a trial are part of what a `fill_data_parallel` study measures (issue 33):
`--gpus-per-trial` (or `hardware.gpus_per_trial`, or the listed `gpus`) sets the derived
`--data-parallel-size`. Changing them used to keep the study's measurement: trials measured
as 2 x TP=2 were then reported and exported as 1 x TP=2, and new trials were scored against
the 4-GPU baseline. Now it is a changed measurement: refused in one line, or with
`--accept-changes` a new baseline, and the old trials keep the shape they were measured at."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_study import _spec

from tuner import trial as tr
from tuner.errors import UserError
from tuner.results.best import best_report
from tuner.run.loop import StudyLoop
from tuner.runners.plan import PlanRunner
from tuner.spec.space import serve_argv
from tuner.spec.study import StudySpec
from tuner.store.storage import Store
from tuner.trial import specs
from tuner_testing import sim_study, tuner

TP = {"type": "categorical", "choices": [1, 2], "default": 2}


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(f"sqlite:///{tmp_path}/t.db")
    yield s
    s.close()


def _shape(tokenizer: Path, *, fill: bool = True, **hardware: Any) -> StudySpec:
    data = _spec(tokenizer).model_dump(exclude={"file_contents"})
    del data["engine"]["flags"]["tensor-parallel-size"]
    data["search_space"] = {"parameters": {"tensor-parallel-size": TP}, "fill_data_parallel": fill}
    data["hardware"].update(hardware)
    return StudySpec.model_validate(data)


def _dp(spec: StudySpec, params: dict[str, Any]) -> str:
    argv = serve_argv(spec, params)
    return argv[argv.index("--data-parallel-size") + 1]


def test_the_gpus_of_a_trial_are_measured_under_fill_and_only_there(tiny_model_dir: Path) -> None:
    four = _shape(tiny_model_dir, gpus="0-3", gpus_per_trial=4).model_dump()
    two = _shape(tiny_model_dir, gpus="0-3", gpus_per_trial=2).model_dump()
    assert specs.spec_id(four) != specs.spec_id(two)
    (line,) = specs.changes(four, two)
    assert "the GPUs of a trial, which fill_data_parallel fills" in line and "4 → 2" in line
    # more GPUs split into more slots of the same size: the same trials
    eight = _shape(tiny_model_dir, gpus="0-7", gpus_per_trial=4).model_dump()
    assert specs.spec_id(four) == specs.spec_id(eight)
    # the listed GPUs without slots are the trial's GPUs: they count too
    listed = _shape(tiny_model_dir, gpus="0-1").model_dump()
    assert specs.spec_id(_shape(tiny_model_dir).model_dump()) != specs.spec_id(listed)
    # without fill_data_parallel the slots set only how many trials run at once
    a = _shape(tiny_model_dir, fill=False, gpus="0-3", gpus_per_trial=4).model_dump()
    b = _shape(tiny_model_dir, fill=False, gpus="0-3", gpus_per_trial=2).model_dump()
    assert specs.spec_id(a) == specs.spec_id(b) and specs.changes(a, b) == []


def test_other_gpus_per_trial_are_refused_or_a_new_baseline_and_old_trials_keep_their_shape(
    tiny_model_dir: Path, store: Store
) -> None:
    four = _shape(tiny_model_dir, gpus="0-3", gpus_per_trial=4)
    StudyLoop(four, store, PlanRunner(four)).run(n_trials=2)
    two = _shape(tiny_model_dir, gpus="0-3", gpus_per_trial=2)
    with pytest.raises(UserError) as err:  # `tuner run --gpus-per-trial 2`
        StudyLoop(two, store, PlanRunner(two))
    assert "4 → 2" in str(err.value) and "--accept-changes" in str(err.value)
    assert "\n" not in str(err.value)
    loop = StudyLoop(two, store, PlanRunner(two), accept_changes=True)
    loop.run(n_trials=1)
    trials = loop.study.get_trials()
    record = tr.StudyRecord.of(loop.study)
    old, new = tr.read(trials[0]), tr.read(trials[-1])
    assert old.baseline and new.baseline  # the new measurement has its own baseline
    assert trials[-1].user_attrs[tr.REFERENCE] == new.number
    # each trial is reported and exported at the shape it was measured at
    assert old.params == new.params == {"tensor-parallel-size": 2}
    assert _dp(specs.spec_for(record, old), old.params) == "2"
    assert _dp(specs.spec_for(record, new), new.params) == "1"
    assert "--data-parallel-size 1" in best_report(loop.points(), loop.name, record)


@pytest.mark.slow  # one engine start on the simulated engine
def test_tuner_run_with_other_gpus_per_trial_is_one_line_and_best_keeps_the_measured_shape(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    study = sim_study(
        tmp_path,
        tiny_model_dir,
        flags={"tensor-parallel-size": None},  # the shape is searched
        workload={"num_prompts": 4, "request_rate": 8},
        search_space={"parameters": {"tensor-parallel-size": TP}, "fill_data_parallel": True},
        budget={"n_trials": 1},
    )
    slots = ["--gpus", "0-3", "--gpus-per-trial"]
    first = tuner("run", str(study), *slots, "4", cwd=tmp_path, timeout=300)
    assert first.returncode == 0, first.stderr
    again = tuner("run", str(study), *slots, "2", "--n-trials", "1", cwd=tmp_path, timeout=300)
    assert again.returncode == 2 and again.stderr.count("\n") == 1, again.stderr
    assert "the GPUs of a trial" in again.stderr and "4 → 2" in again.stderr
    best = tuner("best", str(study), cwd=tmp_path, timeout=120)
    assert best.returncode == 0, best.stderr
    assert "--data-parallel-size 2" in " ".join(best.stdout.replace("\\\n", " ").split())
