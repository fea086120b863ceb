"""A study file edited between runs: comparable changes go on, others stop or start anew."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from test_study import _spec

from tuner import trial as tr
from tuner.errors import UserError
from tuner.results.best import best_report
from tuner.run.loop import StudyLoop
from tuner.runners.plan import PlanRunner
from tuner.store.storage import Store
from tuner.trial import spec_ids, specs


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(f"sqlite:///{tmp_path}/t.db")
    yield s
    s.close()


def _edited(tokenizer: Path):
    """The issue's edit: TP 4 → 2, max-model-len 8192 → 4096, rate 8 → 2, input 256 → 128."""
    spec = _spec(tokenizer)
    data = spec.model_dump()
    data["engine"]["flags"].update({"tensor-parallel-size": 2, "max-model-len": 4096})
    data["workload"].update({"request_rate": 2.0, "random_input_len": 128})
    data["objective"]["slo"] = ["p99_ttft_ms<=5000"]
    data["budget"]["n_trials"] = 9
    return type(spec).model_validate(data)


def test_comparable_changes_keep_the_spec_id(tiny_model_dir: Path) -> None:
    a = _spec(tiny_model_dir).model_dump()
    b = _spec(
        tiny_model_dir,
        budget={"n_trials": 50, "timeout": "8h"},
        sampler={"name": "random", "seed": 7},
        trial={"stall_timeout_s": 120},
        description="edited",
    ).model_dump()
    assert specs.spec_id(a) == specs.spec_id(b)
    assert specs.changes(a, b) == []


def test_a_changed_mode_or_capacity_search_is_a_changed_measurement(tiny_model_dir: Path) -> None:
    capacity = _spec(tiny_model_dir, objective={"mode": "capacity", "slo": ["p99_ttft_ms<=9"]})
    searched = _spec(
        tiny_model_dir,
        objective={"mode": "capacity", "slo": ["p99_ttft_ms<=9"], "capacity": {"max_runs": 4}},
    )
    ids = {specs.spec_id(x.model_dump()) for x in (_spec(tiny_model_dir), capacity, searched)}
    assert len(ids) == 3  # a changed mode or search is a changed measurement


def test_longdoc_fields_count_only_for_the_longdoc_dataset(tiny_model_dir: Path) -> None:
    a = _spec(tiny_model_dir).model_dump()
    # under another dataset the long-document fields are not part of the measurement
    assert "longdoc" not in json.dumps(spec_ids.measured_part(spec_ids.canonical(a)))
    b = {**a, "workload": {**a["workload"], "longdoc_lengths": [100]}}
    assert specs.spec_id(a) == specs.spec_id(b)  # random prompts: the field measures nothing
    ld = {**a, "workload": {**a["workload"], "dataset_name": "longdoc"}}
    ld2 = {**ld, "workload": {**ld["workload"], "longdoc_lengths": [100]}}
    assert len({specs.spec_id(a), specs.spec_id(ld), specs.spec_id(ld2)}) == 3
    assert specs.changes(ld, ld2) == ["workload.longdoc_lengths: [512, 2048, 8192, 32768] → [100]"]


def test_document_reuse_fields_are_part_of_the_longdoc_measurement(tiny_model_dir: Path) -> None:
    """`longdoc_questions`, `longdoc_system_len` and `longdoc_order` are hashed like every
    other field of the long-document dataset (no field is left out for older ids: a database
    of an earlier build is refused, `tuner.store.schema`)."""
    a = _spec(tiny_model_dir).model_dump()
    ld = {**a, "workload": {**a["workload"], "dataset_name": "longdoc"}}
    hashed = json.dumps(spec_ids.measured_part(spec_ids.canonical(ld)))
    for field in ("longdoc_lengths", "longdoc_questions", "longdoc_order", "longdoc_system_len"):
        assert field in hashed
    asked = {**ld, "workload": {**ld["workload"], "longdoc_questions": [4]}}
    assert specs.spec_id(asked) != specs.spec_id(ld)
    assert specs.changes(ld, asked) == ["workload.longdoc_questions: [1] → [4]"]


def test_changes_name_what_a_trial_measures(tiny_model_dir: Path) -> None:
    diff = specs.changes(_spec(tiny_model_dir).model_dump(), _edited(tiny_model_dir).model_dump())
    assert "engine.flags.tensor-parallel-size: 4 → 2" in diff
    assert "workload.request_rate: 8.0 → 2.0" in diff
    assert "workload.random_input_len: 256 → 128" in diff
    assert not any(d.startswith("budget") for d in diff)


def test_edited_study_file_stops_the_run_with_one_line(tiny_model_dir: Path, store: Store) -> None:
    StudyLoop(_spec(tiny_model_dir), store, PlanRunner(_spec(tiny_model_dir))).run(n_trials=2)
    edited = _edited(tiny_model_dir)
    with pytest.raises(UserError) as err:
        StudyLoop(edited, store, PlanRunner(edited))
    text = str(err.value)
    assert "tensor-parallel-size: 4 → 2" in text and "--accept-changes" in text
    assert "new name" in text and "\n" not in text
    study = store.load_study("loop-simulated")
    assert len(study.trials) == 2  # nothing ran under the edited file
    assert (
        specs.spec_for(tr.StudyRecord.of(study), tr.read(study.trials[0])).engine.flags[
            "tensor-parallel-size"
        ]
        == 4
    )


def test_accepted_changes_start_a_new_baseline_and_never_compare(
    tiny_model_dir: Path, store: Store
) -> None:
    old = _spec(tiny_model_dir)
    StudyLoop(old, store, PlanRunner(old)).run(n_trials=3)
    edited = _edited(tiny_model_dir)
    loop = StudyLoop(edited, store, PlanRunner(edited), accept_changes=True)
    # The old trials' configs again: under the new spec they are measured, never reused.
    for t in loop.study.get_trials()[:3]:
        loop.study.enqueue_trial(t.params)
    loop.run(n_trials=4)
    trials = loop.study.get_trials()
    old_ids = {t.user_attrs[tr.SPEC_OF] for t in trials[:3]}
    new = trials[3:]
    assert len(old_ids) == 1 and old_ids != {loop.spec_id}
    assert all(t.user_attrs[tr.SPEC_OF] == loop.spec_id for t in new)
    assert not any(tr.REUSED_FROM in t.user_attrs for t in new)
    baseline = next(t for t in new if t.user_attrs.get(tr.BASELINE))
    assert baseline.user_attrs[tr.SCORE] == 0.0
    for t in new:
        if tr.SCORE in t.user_attrs:
            assert t.user_attrs[tr.REFERENCE] in {x.number for x in new}
    # The budget counts the new spec's trials only; best reads them only, with their spec.
    assert loop.trials_left(None) == 9 - 4
    points = loop.points()
    assert {p.number for p in points} == {t.number for t in new}
    assert "--tensor-parallel-size 2" in best_report(
        points, loop.name, tr.StudyRecord.of(loop.study)
    )
    first = tr.read(trials[0])
    assert (
        specs.spec_for(tr.StudyRecord.of(loop.study), first).engine.flags["tensor-parallel-size"]
        == 4
    )


def test_changing_a_parameters_log_setting_is_one_line_not_a_traceback(
    tiny_model_dir: Path, store: Store
) -> None:
    old = _spec(tiny_model_dir)
    StudyLoop(old, store, PlanRunner(old)).run(n_trials=2)
    data = old.model_dump()
    data["search_space"]["parameters"]["max-num-seqs"]["log"] = False
    edited = type(old).model_validate(data)
    for accept in (False, True):  # Optuna's storage cannot hold both: only a new name works
        with pytest.raises(UserError, match=r"parameters.max-num-seqs: .*log.*new name"):
            StudyLoop(edited, store, PlanRunner(edited), accept_changes=accept)
    study = store.load_study("loop-simulated")
    assert study.get_trials(states=(optuna.trial.TrialState.RUNNING,)) == []
    # A range change is storable: accepted, it runs.
    data = old.model_dump()
    data["search_space"]["parameters"]["max-num-seqs"]["high"] = 128
    data["search_space"]["parameters"]["max-num-seqs"]["default"] = 128
    ranged = type(old).model_validate(data)
    loop = StudyLoop(ranged, store, PlanRunner(ranged), accept_changes=True)
    assert loop.run(n_trials=2).ran == 2


def test_a_new_study_stores_its_spec_with_its_id(tiny_model_dir: Path, store: Store) -> None:
    spec = _spec(tiny_model_dir)
    loop = StudyLoop(spec, store, PlanRunner(spec))
    attrs = loop.study.user_attrs
    assert attrs[tr.SPEC_ID] == loop.spec_id == specs.spec_id(attrs[tr.SPEC])
    loop.run(n_trials=2)
    again = StudyLoop(spec, store, PlanRunner(spec))
    assert again.spec_id == loop.spec_id and len(again.points()) == 2


def test_a_stored_spec_this_tuner_refuses_is_one_line(tiny_model_dir: Path, store: Store) -> None:
    """An older tuner stored a value that today's checks refuse: no traceback for readers."""
    from tuner.store.storage import spec_of

    spec = _spec(tiny_model_dir)
    loop = StudyLoop(spec, store, PlanRunner(spec))
    old = loop.study.user_attrs[tr.SPEC]
    old["workload"]["num_prompts"] = 10**9
    loop.study.set_user_attr(tr.SPEC, old)
    with pytest.raises(UserError, match=r"workload.num_prompts: .*new study name"):
        spec_of(loop.study)


HOLD = """
import sys, time
from tuner.run.lock import StudyLock
from tuner.store.storage import Store
StudyLock(Store(sys.argv[1]), sys.argv[2]).acquire()
print("held", flush=True)
time.sleep(60)
"""


def test_a_run_refused_by_the_lock_leaves_the_live_runs_spec_alone(
    tiny_model_dir: Path, store: Store
) -> None:
    """Found while adding benchmarks/soak.py's second-run fault: a second `tuner run
    --accept-changes` of an edited file, refused because a run holds the study, had already
    made its spec the current one, so the live run compared its trials with the other spec's
    (none) and the next run of the live run's own file was refused as changed."""
    import subprocess
    import sys

    old = _spec(tiny_model_dir)
    loop = StudyLoop(old, store, PlanRunner(old))
    loop.run(n_trials=2)
    url = str(store.engine.url)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, url, loop.name], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        edited = _edited(tiny_model_dir)
        with pytest.raises(UserError, match="already being run"):
            StudyLoop(edited, store, PlanRunner(edited), accept_changes=True).run(n_trials=1)
    finally:
        holder.kill()
        holder.wait()
    study = store.load_study(loop.name)
    assert study.user_attrs[tr.SPEC_ID] == loop.spec_id
    assert len(loop.points()) == 2
    StudyLoop(old, store, PlanRunner(old)).run(n_trials=1)  # the same file goes on unrefused


def test_a_baseline_left_waiting_by_another_spec_is_not_this_specs(
    tiny_model_dir: Path, store: Store
) -> None:
    old = _spec(tiny_model_dir)
    first = StudyLoop(old, store, PlanRunner(old))
    first.run(n_trials=1)
    stale = dict(first.study.get_trials()[0].params)
    first.study.enqueue_trial(stale, user_attrs={tr.BASELINE: True, tr.SPEC_OF: first.spec_id})
    data = old.model_dump()
    data["search_space"]["parameters"]["max-num-seqs"]["default"] = 64
    data["budget"]["timeout"] = "1h"
    edited = type(old).model_validate(data)
    loop = StudyLoop(edited, store, PlanRunner(edited), accept_changes=True)
    loop.run(n_trials=2)
    new = [p for p in loop.points()]
    (base,) = [p for p in new if p.baseline]
    assert base.params["max-num-seqs"] == 64
    assert loop.time_used_s() < sum(
        (t.datetime_complete - t.datetime_start).total_seconds()
        for t in loop.study.get_trials()
        if t.datetime_complete
    )  # the time budget counts this spec's trials only
