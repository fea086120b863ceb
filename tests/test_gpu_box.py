"""A GPU box's state (docs/reliability.md, "A busy GPU"): GPU memory read from nvidia-smi,
vLLM's free-memory refusal and GPU faults classified from their own words, a busy box waited
for and never told to the sampler, a GPU fault retried once, and the simulated engine's
stand-ins for them. Pure tests first; two whole runs on `tuner sim serve` at the end."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import optuna
import pytest

from tuner.engine import gpu_memory as gm
from tuner.engine.failures import Failure, classify_failure, gpu_fault, on_busy_box
from tuner.errors import FailureKind, UserError
from tuner.measure.measurement import Measurement
from tuner.sim.faults import FaultPlan, busy_message, count_start, held_mib, note_exit

# vLLM 0.32's refusal as its EngineCore logs it (vllm/v1/worker/utils.py, `request_memory`)
BUSY_LOG = """\
(EngineCore_DP0 pid=4242) ERROR 12-02 10:32:24 [core.py:1512] EngineCore failed to start.
(EngineCore_DP0 pid=4242) ERROR 12-02 10:32:24 [core.py:1512] ValueError: Free memory on device \
cuda:0 (3.25/47.41 GiB) on startup is less than desired GPU memory utilization (0.9, 42.67 GiB). \
Decrease GPU memory utilization or reduce GPU memory used by other processes.
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""

SMI_GPUS = "0, NVIDIA RTX A6000, 40512, 49140, GPU-aa\n1, NVIDIA RTX A6000, 3, 49140, GPU-bb\n"
SMI_APPS = "4242, 40000, GPU-aa\n77, [N/A], GPU-aa\n"


def test_nvidia_smi_text_is_read_and_bad_lines_left_out() -> None:
    gpus = gm.parse_gpus(SMI_GPUS + "garbage\n2, X, [N/A], 100, GPU-cc\n")
    assert [(g.index, g.used_mib, g.total_mib, g.uuid) for g in gpus] == [
        (0, 40512, 49140, "GPU-aa"),
        (1, 3, 49140, "GPU-bb"),
    ]
    assert gpus[0].free_mib == 8628 and gpus[0].free_fraction == 0.17  # rounded down
    apps = gm.parse_apps(SMI_APPS + "No running processes found\n")
    assert apps == [gm.GpuApp(4242, 40000, "GPU-aa"), gm.GpuApp(77, None, "GPU-aa")]
    assert gm.parse_gpus("0, A, 1 MiB, 2 MiB")[0].total_mib == 2  # with units too


def test_the_holders_of_a_gpu_are_named_with_its_free_memory() -> None:
    box = gm.BoxMemory(tuple(gm.parse_gpus(SMI_GPUS)), tuple(gm.parse_apps(SMI_APPS)))
    busy, idle = box.gpus
    assert box.held_by_others_mib(busy) == 40000 and box.held_by_others_mib(idle) == 0
    line = gm.describe(box, busy, names=lambda pid: "python3" if pid == 4242 else "")
    assert line == (
        "GPU 0 (NVIDIA RTX A6000): 8,628 of 49,140 MiB free, "
        "held by pid 4242 (python3, 40,000 MiB); pid 77"
    )
    assert gm.busy_now(box, [1]) == "" and gm.busy_now(box, [0]).startswith("GPU 0")
    assert gm.busy_now(box, None).startswith("GPU 0")  # every GPU when the engine sees all
    assert gm.engine_gpus(None, {"CUDA_VISIBLE_DEVICES": "1,0"}) == [1, 0]
    assert gm.engine_gpus(None, {"CUDA_VISIBLE_DEVICES": "GPU-aa"}) is None
    assert gm.engine_gpus([3], {"CUDA_VISIBLE_DEVICES": "0"}) == [3]


def test_vllm_free_memory_refusal_is_the_box_not_the_config() -> None:
    f = classify_failure(BUSY_LOG, exit_code=1)
    assert f.kind == FailureKind.BOX_BUSY
    assert f.reason.startswith("ValueError: Free memory on device cuda:0 (3.25/47.41 GiB)")
    second = (
        "ValueError: ... is less than the engine's budget after excluding external process's "
        "weights"
    )
    assert classify_failure(second, exit_code=1).kind == FailureKind.BOX_BUSY
    # the simulator says it in vLLM's words
    sim = busy_message(48 * 2**30, 0.9)
    assert classify_failure(sim, exit_code=1).kind == FailureKind.BOX_BUSY
    assert "(3.36/48.00 GiB)" in sim and "(0.9, 43.20 GiB)" in sim


def test_a_start_failure_while_others_hold_memory_is_box_busy() -> None:
    oom = Failure(FailureKind.OUT_OF_MEMORY, "torch.OutOfMemoryError: CUDA out of memory", "")
    held = "GPU 0 (A6000): 8,628 of 49,140 MiB free, held by pid 4242"
    assert on_busy_box(oom, held).kind == FailureKind.BOX_BUSY
    assert held in on_busy_box(oom, held).reason
    assert on_busy_box(oom, "") == oom  # nobody else there: the config's own
    bad = Failure(FailureKind.INVALID_ARGUMENT, "error: argument --max-num-seqs", "")
    assert on_busy_box(bad, held) == bad  # a refusal of the config stays one


@pytest.mark.parametrize(
    "line",
    [
        "[12345.6] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
        "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
        "[rank0]:[E1202 10:32:24 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600000 ms",
        "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    ],
)
def test_gpu_faults_are_read_from_their_own_words(line: str) -> None:
    log = f"INFO 12-02 10:32:20 [core.py:1] step\n{line}\nEngineDeadError: engine died\n"
    found = gpu_fault(log)
    assert found is not None and found.kind == FailureKind.GPU_FAULT
    assert classify_failure(log, exit_code=1).kind == FailureKind.GPU_FAULT
    assert gpu_fault("RuntimeError: Engine core initialization failed") is None


def test_waits_end_when_memory_is_back_and_are_bounded() -> None:
    before = gm.BoxMemory((gm.GpuMemory(0, "A", 500, 49140),))
    readings = iter([40000, 20000, 600])
    slept: list[float] = []

    def read() -> gm.BoxMemory:
        return gm.BoxMemory((gm.GpuMemory(0, "A", next(readings), 49140),))

    assert gm.wait_released(before, None, 60, read=read, sleep=slept.append)
    assert len(slept) == 2  # back within the slack at the third reading
    stuck = gm.BoxMemory((gm.GpuMemory(0, "A", 40000, 49140),))
    assert not gm.wait_released(before, [0], 0.0, read=lambda: stuck, sleep=slept.append)
    assert gm.wait_free(0.9, [0], 0.0, read=lambda: stuck, sleep=slept.append) == stuck
    free = gm.BoxMemory((gm.GpuMemory(0, "A", 600, 49140),))
    assert gm.wait_free(0.9, [0], 60, read=lambda: free, sleep=slept.append) == free
    assert gm.wait_released(before, None, 60, read=lambda: None)  # no GPU: nothing to wait for


def test_the_simulated_engine_counts_starts_and_holds_memory_after_exit(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    plan = FaultPlan(busy_starts=2, release_s=30.0, state=str(state))
    assert [count_start(plan) for _ in range(3)] == [1, 2, 3]
    assert held_mib(state, 9000) == 9000  # this process is the "engine": alive
    note_exit(plan)
    assert json.loads(state.read_text())["starts"] == 3
    assert held_mib(state, 9000) == 9000  # gone, its memory not yet released
    assert held_mib(state, 9000, now=time.time() + 31) == 0


def test_check_and_init_lines_name_memory_other_processes_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tuner.scaffold.box import memory_lines
    from tuner_testing.gpu_box import fake_nvidia_smi

    gpus = [{"name": "NVIDIA RTX A6000", "used": 40512, "total": 49140}]
    env = fake_nvidia_smi(tmp_path, gpus=gpus, apps=[{"pid": os.getpid(), "used": 40000}])
    monkeypatch.setenv("PATH", env["PATH"])
    (line,) = memory_lines(wanted=0.9)
    assert line.startswith("GPU 0 (NVIDIA RTX A6000): 40,000 MiB in use by other processes: pid")
    assert "gpu-memory-utilization up to 0.17 can start now (the study's 0.9 would not)" in line
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert memory_lines() == []  # no GPU: nothing said


def test_a_trial_launches_again_a_bounded_number_of_times() -> None:
    from tuner.runners.engine_runner import PORT_ATTEMPTS, _memory_fraction, _Tries

    busy = _Tries()
    assert [busy.again("box_busy") for _ in range(4)] == [True, True, True, False]
    fault = _Tries()
    assert [fault.again("gpu_fault") for _ in range(2)] == [True, False]
    port = _Tries()
    assert sum(port.again("port_in_use") for _ in range(5)) == PORT_ATTEMPTS - 1
    assert _memory_fraction(["vllm", "--gpu-memory-utilization", "0.8"]) == 0.8
    assert _memory_fraction(["vllm", "--gpu-memory-utilization=0.7"]) == 0.7
    assert _memory_fraction(["vllm"]) == 0.9  # vLLM's default


# The loop, in process: a runner whose measurements say what the box did ---------------------


def _runner(spec, faults: dict[int, Measurement]):
    from tuner.runners.plan import PlanRunner

    class Box(PlanRunner):
        def measure(self, ctx):
            found = faults.get(ctx.number)
            return found if found is not None else super().measure(ctx)

    return Box(spec)


def _busy(reason: str = "ValueError: Free memory on device cuda:0 (3.25/47.41 GiB)") -> Measurement:
    return Measurement(failure_kind=FailureKind.BOX_BUSY, failure_reason=reason, box_waits=3)


def _fault(number: int) -> Measurement:
    reason = f"CUDA error: an illegal memory access was encountered [GPU 0 (A6000)] #{number}"
    return Measurement(failure_kind=FailureKind.GPU_FAULT, failure_reason=reason, gpu_faults=1)


@pytest.fixture
def loop_parts(tmp_path: Path, tiny_model_dir: Path):
    import yaml

    from tuner.spec.study import StudySpec
    from tuner.store.storage import Store
    from tuner_testing import sim_study

    data = yaml.safe_load(sim_study(tmp_path, tiny_model_dir).read_text())
    data["sampler"] = {"name": "random", "seed": 1}
    store = Store(f"sqlite:///{tmp_path}/t.db")
    yield StudySpec.model_validate(data), store
    store.close()


@pytest.mark.slow  # a study on the planner: `make test`, as tests/test_study.py
def test_a_busy_box_stops_the_run_and_is_never_the_configs(loop_parts) -> None:
    from tuner.run.loop import StudyLoop
    from tuner.run.reading import budget_used

    spec, store = loop_parts
    loop = StudyLoop(spec, store, _runner(spec, {1: _busy()}))
    with pytest.raises(UserError, match=r"stayed busy .* Free memory on device cuda:0 \(3.25/"):
        loop.run(n_trials=5)
    first, busy = loop.study.get_trials()
    assert first.state == optuna.trial.TrialState.COMPLETE  # measured before the box filled
    assert busy.state == optuna.trial.TrialState.FAIL  # told nothing: TPE skips FAIL trials
    assert busy.user_attrs["failure_kind"] == "box_busy" and busy.user_attrs["box_waits"] == 3
    assert budget_used(loop.points()) == (1, 0)  # the busy trial spent no budget


@pytest.mark.slow
def test_a_gpu_fault_on_one_config_is_its_own_and_on_a_second_stops_the_night(
    loop_parts,
) -> None:
    from tuner.run.loop import StudyLoop

    spec, store = loop_parts
    loop = StudyLoop(spec, store, _runner(spec, {1: _fault(1), 3: _fault(3)}))
    with pytest.raises(UserError, match=r"GPU fault on a second config .*\[GPU 0 \(A6000\)\] #3"):
        loop.run(n_trials=5)
    trials = loop.study.get_trials()
    assert len(trials) == 4
    own, second = trials[1], trials[3]
    # faulted on its fresh start too, alone this night: the config's failure, told as one
    assert own.state == optuna.trial.TrialState.COMPLETE and own.user_attrs["gpu_faults"] == 1
    assert second.state == optuna.trial.TrialState.FAIL  # the GPU's, not told
    assert trials[2].state == optuna.trial.TrialState.COMPLETE  # measured in between


# Whole runs on `tuner sim serve` ----------------------------------------------------------


def _run(tmp_path: Path, tokenizer: Path, flags: dict, *args: str):
    """`tuner run` of a sim study with these fault flags (waits of 0.1 s): its process and
    its stored trials."""
    from tuner_testing import sim_study, tuner

    trial = {"stall_timeout_s": 5, "busy_wait_s": 0.1}
    study = sim_study(tmp_path, tokenizer, flags=flags, trial=trial)
    run = tuner("run", str(study), *args, cwd=tmp_path)
    storage = f"sqlite:///{tmp_path}/tuner.db"
    return run, optuna.load_study(study_name="e2e", storage=storage).trials


def _busy_starts(tmp_path: Path, n: int) -> dict:
    return {"fault-busy-starts": n, "fault-state": str(tmp_path / "sim-state.json")}


@pytest.mark.slow
def test_a_box_busy_on_its_first_two_starts_costs_the_study_nothing(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    run, trials = _run(tmp_path, tiny_model_dir, _busy_starts(tmp_path, 2))
    assert run.returncode == 0, run.stderr
    assert len(trials) == 3
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert not any("failure_kind" in t.user_attrs for t in trials)  # no failure recorded
    assert trials[0].user_attrs["box_waits"] == 2  # its two busy starts: waits, not failures
    assert json.loads((tmp_path / "sim-state.json").read_text())["starts"] == 5


@pytest.mark.slow
def test_a_box_busy_for_good_stops_the_run_naming_the_free_memory(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    run, trials = _run(tmp_path, tiny_model_dir, _busy_starts(tmp_path, 99))
    assert run.returncode != 0
    (line,) = [x for x in run.stderr.splitlines() if x.startswith("tuner: error:")]
    assert "Free memory on device cuda:0 (" in line and "stayed busy through 3 wait" in line
    assert len(trials) <= 1


@pytest.mark.slow
def test_a_gpu_fault_mid_run_is_retried_once_on_a_fresh_start(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    run, trials = _run(tmp_path, tiny_model_dir, {"fault-gpu-fault-after": 2}, "--n-trials", "1")
    assert run.returncode == 0, run.stderr
    (trial,) = trials
    # it faulted on its fresh start too, and no other config faulted: the config's failure
    assert trial.user_attrs["failure_kind"] == "gpu_fault" and trial.user_attrs["gpu_faults"] == 1
    assert "illegal memory access" in trial.user_attrs["failure_reason"]
    assert trial.state == optuna.trial.TrialState.COMPLETE


@pytest.mark.slow
def test_init_and_check_say_what_another_process_holds(tmp_path: Path) -> None:
    from tuner_testing import tuner
    from tuner_testing.gpu_box import fake_nvidia_smi

    gpus = [{"name": "NVIDIA RTX A6000", "used": 40512, "total": 49140}]
    path = fake_nvidia_smi(tmp_path / "bin", gpus=gpus, apps=[{"pid": 4242, "used": 40000}])
    env = {**os.environ, **path}
    said = "GPU 0 (NVIDIA RTX A6000): 40,000 MiB in use by other processes: pid 4242"
    args = ["--model", "tiny-qwen2", "--engine", "sim", "-o", "s.yaml", "--no-preview"]
    init = tuner("init", *args, cwd=tmp_path, env=env)
    assert init.returncode == 0, init.stderr
    assert said in init.stdout and "up to 0.17 can start now" in init.stdout
    check = tuner("check", "s.yaml", "--no-preview", cwd=tmp_path, env=env)
    assert said in check.stdout and "(the study's 0.9" in check.stdout
