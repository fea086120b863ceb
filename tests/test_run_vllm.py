"""`tuner run` against real vLLM (the CPU build) with the tiny dummy model.

Every engine start costs 20–60 s here, so these tests start as few engines as the checks
allow. They share the CLI helpers of `tuner_testing` with the simulated runs.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import optuna
import pytest
import yaml
from test_run_sim import _engines, _no_engine_left, _trials

from tuner.engine.sockets import RPC_BASE_ENV
from tuner.errors import RULE_REFUSALS
from tuner.runners.engine_runner import CACHE_DIR
from tuner.store.storage import Store
from tuner.trial.keys import PREDICTED
from tuner_testing import cpu_study, start_run, trial_row, tuner

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parent.parent
MODEL_INFO = "vllm.model_executor.models.qwen2.Qwen2ForCausalLM"


@pytest.fixture
def study_file(tmp_path: Path, tiny_model_dir: Path, vllm_python: Path) -> Path:
    from conftest import study_core

    return cpu_study(tmp_path, tiny_model_dir, vllm_python, study_core())


def _budgeted(trials: list) -> list:
    """The trials that use the budget: a config vLLM's rules refuse is never launched and
    not counted in n_trials (docs/early-stopping.md)."""
    return [
        t
        for t in trials
        if not (t.user_attrs.get(PREDICTED) and t.user_attrs.get("failure_kind") in RULE_REFUSALS)
    ]


def test_cpu_study_runs_resumes_reads_its_cache_and_exports(
    tmp_path: Path, study_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two trials, a resumed third, `best`; every start after the first reads the cache the
    first wrote (one `VLLM_CACHE_ROOT` per study, beside its logs), and each engine's IPC
    sockets lived in a folder of their own, gone with the engine (`tuner.engine.sockets`)."""
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)  # the tuner sets it: none of ours
    monkeypatch.delenv(RPC_BASE_ENV, raising=False)
    data = yaml.safe_load(study_file.read_text())
    data["engine"]["env"]["VLLM_LOGGING_LEVEL"] = "DEBUG"  # the cache's words are debug lines
    study_file.write_text(yaml.safe_dump(data, sort_keys=False))

    run = tuner("run", str(study_file), "--n-trials", "2", cwd=tmp_path, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    trials = _trials(tmp_path, "cpu-tiny")
    assert len(_budgeted(trials)) == 2  # refused by vLLM's rules: no trial of the budget
    measured = [t for t in trials if "failure_kind" not in t.user_attrs]
    assert measured, [t.user_attrs.get("failure_reason") for t in trials]
    for t in measured:
        assert t.user_attrs["completed"] == 16
        assert t.user_attrs["total_output_tokens"] == 16 * 16
        assert t.user_attrs["mean_tpot_ms"] > 0 and t.user_attrs["output_throughput"] > 0
        assert t.user_attrs["simulated"] is False
        assert t.user_attrs["vllm_version"].startswith("0.")
    assert _no_engine_left(tmp_path)

    again = tuner("run", str(study_file), "--n-trials", "1", cwd=tmp_path, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(_budgeted(_trials(tmp_path, "cpu-tiny"))) == 3  # continued, not started over

    best = tuner("best", str(study_file), cwd=tmp_path)
    assert best.returncode == 0, best.stderr
    command = " ".join(x for x in best.stdout.splitlines() if not x.startswith("#"))
    assert "VLLM_CPU_KVCACHE_SPACE=" in command and " vllm serve " in command
    assert "--load-format" not in command
    assert RPC_BASE_ENV not in command and "VLLM_CACHE_ROOT" not in command
    assert _no_engine_left(tmp_path)
    # the start-up phases the real engine's log told (issue 48): dummy weights log no load
    # line, but model init and the engine's init are vLLM 0.32's own lines
    listed = tuner("trials", str(study_file), "--format", "json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    phases = [r["startup_phases"] for r in json.loads(listed.stdout) if r.get("startup_phases")]
    assert phases and all(p.get("init_engine_s", 0) > 0 for p in phases), phases

    # The cache: the first start misses vLLM's model inspection and writes it; the later
    # starts (the resumed run's too) read it. On this CPU build with `--enforce-eager` nothing
    # is compiled: model info is what vLLM caches (vllm/model_executor/models/registry.py).
    logs = sorted((tmp_path / "runs").glob("*/trial-*.log"))
    assert len(logs) >= 2, [p.name for p in logs]
    cache = logs[0].parent / CACHE_DIR
    assert (cache / "modelinfos" / (MODEL_INFO.replace(".", "-") + ".json")).is_file()
    first, *later = (p.read_text(errors="replace") for p in logs)
    assert f"Cached model info file for class {MODEL_INFO} not found" in first
    for text in later:
        assert f"Loaded model info for class {MODEL_INFO} from cache" in text
        assert f"Cached model info file for class {MODEL_INFO} not found" not in text
    # The sockets' folders: one per start, named in the trial's env, removed after the stop.
    store = Store(f"sqlite:///{tmp_path}/tuner.db")
    rows = [trial_row(store, "cpu-tiny", t.number) for t in _trials(tmp_path, "cpu-tiny")]
    store.close()
    folders = {r["env"][RPC_BASE_ENV] for r in rows if r and RPC_BASE_ENV in (r["env"] or {})}
    assert len(folders) == len(logs) and not any(Path(f).exists() for f in folders)


def _until_measuring(tmp_path: Path, proc: subprocess.Popen, launches: int) -> None:
    """Return once the `launches`-th engine of the study serves requests."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        logs = sorted((tmp_path / "runs").rglob("trial-*.log"))  # trial-<number>-<time>
        newest = logs[-1].read_text("utf-8", "replace") if len(logs) >= launches else ""
        if "POST /v1/completions" in newest:
            return
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.5)
    proc.kill()
    raise AssertionError("no request reached the engine")


def test_kill_9_mid_trial_then_a_rerun_recovers_and_ctrl_c_stops_it(
    tmp_path: Path, study_file: Path
) -> None:
    """A dead tuner's engine and trial are taken back by the next run; a Ctrl-C during that
    run's measurement ends it with 130, its trial failed with the reason, no engine left.
    (Two engine starts: the rerun's trial is the one interrupted.)"""
    data = yaml.safe_load(study_file.read_text())
    data["workload"].update(num_prompts=2000, random_output_len=64)  # measuring for minutes
    data["budget"] = {"n_trials": 1}
    study_file.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = start_run(study_file, tmp_path)
    _until_measuring(tmp_path, proc, launches=1)
    proc.kill()
    proc.communicate(timeout=30)
    (stale,) = _trials(tmp_path, "cpu-tiny")
    assert stale.state == optuna.trial.TrialState.RUNNING
    assert any(running for *_, running in _engines(tmp_path))

    # The rerun stops whatever the dead tuner left, marks its trial, and spends the budget
    # (1 trial: an interrupted one does not count) on a fresh one, which Ctrl-C then stops.
    rerun = start_run(study_file, tmp_path)
    _until_measuring(tmp_path, rerun, launches=2)
    first = _trials(tmp_path, "cpu-tiny")[0]
    assert first.state == optuna.trial.TrialState.FAIL
    assert first.user_attrs["failure_kind"] == "interrupted"
    rerun.send_signal(signal.SIGINT)
    rerun.communicate(timeout=120)
    assert rerun.returncode == 130
    _, second = _trials(tmp_path, "cpu-tiny")
    assert second.state == optuna.trial.TrialState.FAIL
    assert second.user_attrs["failure_reason"] == "interrupted by SIGINT"
    assert _no_engine_left(tmp_path)
    assert not any(running for *_, running in _engines(tmp_path))
