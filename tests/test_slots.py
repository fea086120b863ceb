"""GPU slots on one box: disjoint CUDA_VISIBLE_DEVICES, cores split, no engine left."""

from __future__ import annotations

import os
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa

from tuner.errors import UserError
from tuner.run.slots import plan_slots
from tuner.spec.sections import HardwareSpec
from tuner.spec.study import load_study_spec
from tuner.store.schema import engines_table, trials_table
from tuner_testing import measured_at_once, sim_study, tuner
from tuner_testing.inprocess import tuner_in_process
from tuner_testing.waiting import serving_engines, wait_for

pytestmark = pytest.mark.slow  # whole studies: `make test`, not `make test-fast`


def test_two_slots_run_at_once_on_disjoint_gpus_and_leave_no_engine(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    # TP 2: an engine fits its slot of 2 GPUs (a larger TP is refused before the run)
    flags = {"tensor-parallel-size": 2}
    study = sim_study(tmp_path, tiny_model_dir, flags=flags, budget={"n_trials": 5})
    run = tuner("run", str(study), "--gpus", "0-3", "--gpus-per-trial", "2", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "GPU 0,1" in run.stderr and "GPU 2,3" in run.stderr  # the display shows each slot
    url = f"sqlite:///{tmp_path}/tuner.db"
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(trials_table.c.trial_number, trials_table.c.env)).all()
        engines = conn.execute(sa.select(engines_table)).all()
    engine.dispose()
    devices = {r.trial_number: (r.env or {}).get("CUDA_VISIBLE_DEVICES") for r in rows if r.env}
    assert set(devices.values()) == {"0,1", "2,3"}
    trials = {t.number: t for t in optuna.load_study(study_name="e2e", storage=url).get_trials()}
    overlapped = 0
    numbers = sorted(devices)
    for i, a in enumerate(numbers):
        for b in numbers[i + 1 :]:
            ta, tb = trials[a], trials[b]
            if (
                ta.datetime_start < tb.datetime_complete
                and tb.datetime_start < ta.datetime_complete
            ):
                overlapped += 1
                assert set(devices[a].split(",")).isdisjoint(devices[b].split(","))
    assert overlapped >= 1, "the two slots never ran a trial at the same time"
    assert measured_at_once(list(trials.values())) == 0
    assert not [e for e in engines if e.running]
    for e in engines:  # every engine's process is gone
        with pytest.raises(ProcessLookupError):
            os.kill(int(e.identity["pid"]), 0)
    logs = list((tmp_path / "runs").rglob("trial-*.log"))
    assert any("CUDA_VISIBLE_DEVICES=2,3" in p.read_text() for p in logs)


def test_slots_with_confirm_confirm_once_per_study(tiny_model_dir: Path, tmp_path: Path) -> None:
    """`--confirm 1` with `confirm_repeats: 1` is one re-measurement of the best config for the
    whole study, not one per GPU slot (there used to be one per slot). The session's logic:
    the slots' loops and the confirmation in this process, each slot's engine the simulation
    core (`tuner_testing.inprocess`); the slots' engine processes are the tests around it."""
    study = sim_study(
        tmp_path,
        tiny_model_dir,
        budget={"n_trials": 3},
        workload={"num_prompts": 8},
        trial={"stall_timeout_s": 5, "confirm_repeats": 1},
        flags={"tensor-parallel-size": 1, "gpu": "h200"},  # one GPU per slot: TP 1 fits
        hardware={"gpu": "h200", "count": 1},
    )
    args = ("--gpus", "0-1", "--gpus-per-trial", "1", "--confirm", "1", "--no-confirm-flags")
    run = tuner_in_process("run", str(study), *args, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "GPU 0" in run.stderr and "GPU 1" in run.stderr  # it did run in two slots
    trials = optuna.load_study(study_name="e2e", storage=f"sqlite:///{tmp_path}/tuner.db").trials
    reruns = [t for t in trials if "confirm_of" in t.user_attrs]
    assert len(reruns) == 1, [t.user_attrs for t in trials]
    assert reruns[0].state == optuna.trial.TrialState.COMPLETE
    assert reruns[0].number > max(t.number for t in trials if "confirm_of" not in t.user_attrs)
    best = tuner_in_process("best", str(study), cwd=tmp_path)
    assert best.returncode == 0, best.stderr
    if f"# best trial {reruns[0].user_attrs['confirm_of']}" in best.stdout:
        assert "confirmed over 2 runs" in best.stdout


def test_cores_are_split_between_slots(tiny_model_dir: Path, tmp_path: Path) -> None:
    spec = load_study_spec(sim_study(tmp_path, tiny_model_dir))
    engine = spec.engine.model_copy(update={"cpu_affinity": [0, 1, 2, 3, 4]})
    hardware = HardwareSpec(gpus="0-7", gpus_per_trial=4)
    slots = plan_slots(spec.model_copy(update={"engine": engine, "hardware": hardware}))
    assert [(s.gpus, s.cores) for s in slots] == [([0, 1, 2, 3], [0, 1, 2]), ([4, 5, 6, 7], [3, 4])]
    few = spec.engine.model_copy(update={"cpu_affinity": [0]})
    with pytest.raises(UserError, match="1 core"):
        plan_slots(spec.model_copy(update={"engine": few, "hardware": hardware}))
    assert plan_slots(spec) == []  # the cautious default: one trial at a time


def test_gpu_lists_and_slots() -> None:
    assert HardwareSpec(gpus="0,2,4-5", gpus_per_trial=2).gpu_slots() == [[0, 2], [4, 5]]
    assert HardwareSpec(gpus="0-2", gpus_per_trial=2).gpu_slots() == [[0, 1]]  # 2 stays idle
    assert HardwareSpec(gpus="0-3").gpu_slots() == [[0, 1, 2, 3]]
    for bad in ("0-", "1,1", "a"):
        with pytest.raises(ValueError):
            HardwareSpec(gpus=bad)


def test_ctrl_c_ends_every_slot_s_trial_as_interrupted(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    import signal
    import subprocess

    from tuner_testing import TUNER

    study = sim_study(
        tmp_path,
        tiny_model_dir,
        budget={"n_trials": 20},
        workload={"num_prompts": 200, "request_rate": 8},  # 25 s per trial: still running
        flags={"tensor-parallel-size": 1, "gpu": "h200"},  # one GPU per slot: TP 1 fits
        hardware={"gpu": "h200", "count": 1},
    )
    run = subprocess.Popen(
        [*TUNER, "run", str(study), "--gpus", "0-1", "--gpus-per-trial", "1"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"sqlite:///{tmp_path}/tuner.db"
    # both slots mid-trial: each one's engine has served a request of its workload
    wait_for(lambda: len(serving_engines(url)) == 2, "both slots' engines serving", 120, proc=run)
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 130, err
    trials = optuna.load_study(study_name="e2e", storage=url).get_trials()
    assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    kinds = [t.user_attrs.get("failure_kind") for t in trials if t.state.name == "FAIL"]
    assert kinds.count("interrupted") >= 2, kinds  # both slots' trials
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        assert not conn.execute(sa.select(engines_table).where(engines_table.c.running)).all()
    engine.dispose()


def test_a_slot_s_runner_is_made_with_the_first_slot_s_workload_and_its_own_tokenizer(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every other slot's runner is made with the workload the first slot's built
    (`run.session`: `with_spec(spec, runner.built())`) and loads its own tokenizer in
    `prepare()`, before its first trial: slots are threads, and one fast tokenizer used by two
    threads can raise "Already borrowed" (huggingface/tokenizers#537)."""
    from tuner.run.session import RunOptions, engine_runners, first_runner
    from tuner.runners import engine_runner, trial_runner

    loaded: list[str] = []
    load = trial_runner.workload_tokenizer
    monkeypatch.setattr(
        trial_runner, "workload_tokenizer", lambda spec: loaded.append(spec.name) or load(spec)
    )
    spec = load_study_spec(sim_study(tmp_path, tiny_model_dir))
    spec = spec.model_copy(update={"hardware": HardwareSpec(gpus="0-3", gpus_per_trial=2)})
    make = engine_runners(spec, tmp_path / "runs", None)
    first = first_runner(spec, make, RunOptions(gpu_slots=True))
    assert len(loaded) == 1
    other = make(plan_slots(spec)[1]).with_spec(spec, first.built())
    other.prepare()
    assert len(loaded) == 2  # its own, loaded now and not in its first trial
    assert other.tokenizer is not first.tokenizer
    assert other.requests == first.requests and other.requests is not first.requests
    assert isinstance(other, engine_runner.EngineRunner) and other.gpus == [2, 3]  # its slot's
