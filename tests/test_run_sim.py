"""`tuner run` end to end on the simulated engine: real processes, HTTP and SQLite.

The engine is `tuner sim serve`, launched exactly as vLLM is. Its fault-injection flags
stand in for the crashes, hangs and slow starts a GPU box produces at 2 a.m.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import optuna
import pytest

from tuner.engine.process import group_members
from tuner.trial import StudyRecord
from tuner_testing import sim_study, start_run, tuner
from tuner_testing.waiting import serving_engines, wait_for

pytestmark = pytest.mark.slow  # whole studies: `make test`, not `make test-fast`


def _trials(tmp_path: Path, name: str = "e2e") -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path}/tuner.db").trials


def _engines(tmp_path: Path) -> list[tuple[int, dict, bool]]:
    import json

    with sqlite3.connect(tmp_path / "tuner.db") as db:
        rows = db.execute("SELECT trial_number, identity, running FROM tuner_engines").fetchall()
    return [(n, json.loads(i), bool(r)) for n, i, r in rows]


def _no_engine_left(tmp_path: Path) -> bool:
    return all(not group_members(ident["pgid"]) for _, ident, _ in _engines(tmp_path))


def test_run_stores_trials_and_prints_a_serve_command(tmp_path: Path, tiny_model_dir) -> None:
    study = sim_study(tmp_path, tiny_model_dir)
    run = tuner("run", str(study), "--n-trials", "2", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "vllm serve deepseek-r1-distill-qwen-32b" in run.stdout
    trials = _trials(tmp_path)
    assert len(trials) == 2
    base = trials[0]
    assert base.user_attrs["baseline"] and base.user_attrs["simulated"] is True
    assert base.user_attrs["vllm_version"].startswith("sim-")
    assert base.user_attrs["completed"] == 16
    stored = optuna.load_study(study_name="e2e", storage=f"sqlite:///{tmp_path}/tuner.db")
    assert StudyRecord.of(stored).simulated  # it measured `tuner sim serve`: labelled so
    assert _engines(tmp_path) and _no_engine_left(tmp_path)
    assert not any(running for *_, running in _engines(tmp_path))

    again = tuner("run", str(study), cwd=tmp_path)  # no --n-trials: finish the budget of 3
    assert again.returncode == 0, again.stderr
    assert len(_trials(tmp_path)) == 3

    csv = tuner("trials", str(study), "--format", "csv", cwd=tmp_path)
    assert csv.returncode == 0 and len(csv.stdout.strip().splitlines()) == 4
    best = tuner("best", str(study), cwd=tmp_path)
    assert best.returncode == 0
    assert "SIMULATED" in best.stdout and "\nvllm serve " in best.stdout
    assert "--gpu " not in best.stdout and "--tokenizer" not in best.stdout


@pytest.mark.parametrize(
    ("flags", "kind", "within_s"),
    [
        ({"fault-crash-after": 4}, "engine_crashed", 30),
        ({"fault-hang-after": 4}, "engine_hung", 30),
        ({"fault-refuse-start": True}, "crashed", 30),
        ({"fault-slow-start-s": 120}, "startup_timeout", 40),
    ],
)
def test_engine_faults_end_the_trial_with_the_reason(
    tmp_path: Path, tiny_model_dir, flags, kind: str, within_s: float
) -> None:
    study = sim_study(tmp_path, tiny_model_dir, flags=flags)
    if kind == "startup_timeout":
        text = study.read_text().replace("startup_timeout_s: 60", "startup_timeout_s: 8")
        study.write_text(text)
    t0 = time.monotonic()
    run = tuner("run", str(study), "--n-trials", "1", cwd=tmp_path)
    elapsed = time.monotonic() - t0
    assert run.returncode == 0, run.stderr
    (trial,) = _trials(tmp_path)
    assert trial.user_attrs["failure_kind"] == kind, trial.user_attrs
    assert trial.state == optuna.trial.TrialState.COMPLETE
    assert trial.constraints["measured"] == 1.0
    assert elapsed < within_s, f"noticed after {elapsed:.0f} s"
    assert _no_engine_left(tmp_path)


def _start_and_wait_for_engine(tmp_path: Path, study: Path) -> subprocess.Popen:
    """`tuner run` in the background, once its engine has served a request of the workload
    (by the engine's own /metrics): mid-trial, the engine up and the workload under way."""
    proc = start_run(study, tmp_path)
    url = f"sqlite:///{tmp_path}/tuner.db"
    wait_for(lambda: serving_engines(url), "an engine serving the workload", 60, proc=proc)
    return proc


LONG = {"num_prompts": 400, "request_rate": 5}


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_ends_the_trial_and_stops_the_engine(
    tmp_path: Path, tiny_model_dir, presses: int
) -> None:
    study = sim_study(tmp_path, tiny_model_dir, workload=LONG)
    proc = _start_and_wait_for_engine(tmp_path, study)
    t0 = time.monotonic()
    for press in range(presses):
        if press:
            time.sleep(0.2)  # a person's second press, while the first is being handled
        proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "tuner: error: interrupted by SIGINT" in err  # one line, Ctrl-C included
    assert time.monotonic() - t0 < 30
    (trial,) = _trials(tmp_path)
    assert trial.state == optuna.trial.TrialState.FAIL
    assert trial.user_attrs["failure_kind"] == "interrupted"
    assert _no_engine_left(tmp_path)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_end_the_trial_like_ctrl_c(
    tmp_path: Path, tiny_model_dir, signum: signal.Signals
) -> None:
    """`timeout`, systemd, `docker stop` (SIGTERM) and a dropped ssh session (SIGHUP)."""
    study = sim_study(tmp_path, tiny_model_dir, workload=LONG)
    t0 = time.monotonic()
    proc = _start_and_wait_for_engine(tmp_path, study)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, err
    lines = [line for line in err.splitlines() if line.startswith("tuner: error:")]
    assert lines == [lines[0]] and f"interrupted by {signum.name}" in lines[0]
    (trial,) = _trials(tmp_path)
    assert trial.state == optuna.trial.TrialState.FAIL
    assert trial.user_attrs["failure_kind"] == "interrupted"
    assert trial.user_attrs["failure_reason"] == f"interrupted by {signum.name}"
    # the engine time used until the signal counts (it had started and served a request)
    used = trial.user_attrs["engine_s"]
    assert 0 < used < time.monotonic() - t0 and used >= trial.user_attrs.get("startup_s", 0)
    assert _no_engine_left(tmp_path)
    assert not any(running for *_, running in _engines(tmp_path))


def test_kill_9_then_rerun_recovers(
    tmp_path: Path, tiny_model_dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TUNER_HEARTBEAT_S", "0.2")  # when the killed run was last seen alive
    study = sim_study(tmp_path, tiny_model_dir, workload=LONG, budget={"n_trials": 1})
    t0 = time.monotonic()
    proc = _start_and_wait_for_engine(tmp_path, study)
    proc.kill()
    proc.communicate(timeout=30)
    killed_after_s = time.monotonic() - t0
    # The engine dies with its tuner (parent-death signal), or the next run stops it.
    study.write_text(study.read_text().replace("num_prompts: 400", "num_prompts: 8"))
    refused = tuner("run", str(study), cwd=tmp_path)  # the workload changed: not comparable
    assert refused.returncode == 2 and "workload.num_prompts: 400 → 8" in refused.stderr
    assert refused.stderr.count("\n") == 1
    rerun = tuner("run", str(study), "--accept-changes", cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr
    first, second = _trials(tmp_path)
    assert first.state == optuna.trial.TrialState.FAIL
    assert first.user_attrs["failure_kind"] == "interrupted"
    # recovery counts the engine time used: from the launch to the last heartbeat
    assert 0 < first.user_attrs["engine_s"] < killed_after_s
    assert second.state == optuna.trial.TrialState.COMPLETE  # the budget of 1 is still met
    assert _no_engine_left(tmp_path)
    assert not any(running for *_, running in _engines(tmp_path))


def test_api_key_reaches_engine_and_client_but_nothing_stored(
    tmp_path: Path, tiny_model_dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-tuner-test-0123456789"
    study = sim_study(tmp_path, tiny_model_dir)
    text = study.read_text().replace(
        "  served_model_name: qwen32b", "  served_model_name: qwen32b\n  api_key_env: TEST_KEY"
    )
    study.write_text(text)
    monkeypatch.setenv("TEST_KEY", secret)
    run = tuner("run", str(study), "--n-trials", "1", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    (trial,) = _trials(tmp_path)
    assert trial.user_attrs["completed"] == 16  # the client authenticated
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    assert secret not in run.stdout + run.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--storage", "sqlite:////nonexistent/dir/t.db"], "cannot open storage"),
        (["--storage", "bogus://x"], "cannot open storage"),
        (["--timeout", "soon"], "--timeout"),
    ],
)
def test_bad_invocations_exit_2_without_a_study(
    tmp_path: Path, tiny_model_dir, args, needle
) -> None:
    study = sim_study(tmp_path, tiny_model_dir)
    run = tuner("run", str(study), *args, cwd=tmp_path)
    assert run.returncode == 2
    assert needle in run.stderr and run.stderr.count("\n") == 1, run.stderr
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "tuner.db").exists()


def test_missing_engine_command_is_a_user_error(tmp_path: Path, tiny_model_dir) -> None:
    study = sim_study(tmp_path, tiny_model_dir)
    study.write_text(study.read_text().replace("- '{python}'", "- no-such-vllm-binary"))
    run = tuner("run", str(study), cwd=tmp_path)
    assert run.returncode == 2
    assert "no-such-vllm-binary" in run.stderr and "not found" in run.stderr
    assert not (tmp_path / "tuner.db").exists()


def test_wrong_memory_predictions_are_reported(tmp_path: Path, tiny_model_dir) -> None:
    """The precheck believes 200 GiB GPUs; the engine has 48 GiB and refuses: a miss."""
    from tuner.run.loop import StudyLoop
    from tuner.runners.engine_runner import EngineRunner
    from tuner.spec.study import load_study_spec
    from tuner.store.storage import Store

    study = sim_study(
        tmp_path, tiny_model_dir, hardware={"gpu": "a6000", "count": 4, "gpu_memory_gib": 200}
    )
    study.write_text(study.read_text().replace("low: 0.7", "low: 0.3"))
    spec = load_study_spec(study)
    store = Store(f"sqlite:///{tmp_path}/tuner.db")
    loop = StudyLoop(spec, store, EngineRunner(spec, tmp_path / "logs", store.url))
    loop.study.enqueue_trial(
        {"max-num-seqs": 64, "max-num-batched-tokens": 2048, "gpu-memory-utilization": 0.3}
    )
    summary = loop.run(n_trials=1)
    trial = loop.study.get_trials()[0]  # then vLLM's defaults, queued as the baseline
    assert summary.precheck_wrong == [0], trial.user_attrs
    assert trial.user_attrs["failure_kind"] == "kv_cache_too_small"
    assert trial.user_attrs["precheck_wrong"] == ("predicted to start; engine kv_cache_too_small")
    store.close()


def test_a_port_taken_before_the_engine_binds_it_is_replaced(
    tmp_path: Path, tiny_model_dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    from tuner.engine import ports
    from tuner.run.loop import StudyLoop
    from tuner.runners.engine_runner import EngineRunner
    from tuner.spec.study import load_study_spec
    from tuner.store.storage import Store

    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    real_free_port = ports.free_port
    handed_out: list[int] = []

    def racy_free_port(host: str = "127.0.0.1") -> int:
        port = taken if not handed_out else real_free_port(host)
        handed_out.append(port)
        return port

    monkeypatch.setattr(ports, "free_port", racy_free_port)
    spec = load_study_spec(sim_study(tmp_path, tiny_model_dir))
    store = Store(f"sqlite:///{tmp_path}/tuner.db")
    loop = StudyLoop(spec, store, EngineRunner(spec, tmp_path / "logs", store.url))
    try:
        loop.run(n_trials=1)
    finally:
        squatter.close()
        store.close()
    (trial,) = loop.study.get_trials()
    assert handed_out[0] == taken and len(handed_out) == 2
    assert trial.user_attrs["completed"] == 16, trial.user_attrs


def test_readers_during_a_run_do_not_lock_it_out(tmp_path: Path, tiny_model_dir) -> None:
    """`tuner trials` and optuna-dashboard's loader poll the file while trials are written."""
    from optuna_dashboard._inmemory_cache import InMemoryCache
    from optuna_dashboard._storage import get_trials

    study = sim_study(tmp_path, tiny_model_dir, budget={"n_trials": 3})
    proc = start_run(study, tmp_path)
    reads = 0
    storage = None
    while proc.poll() is None:
        if (tmp_path / "tuner.db").exists():
            listing = tuner("trials", str(study), "--format", "json", cwd=tmp_path)
            # before the run has created the study (or Optuna's tables in the new file), a
            # reader is told so in one line; it never locks the writer out
            creating = ("no study named", "no such table: version_info")
            assert listing.returncode == 0 or any(c in listing.stderr for c in creating), (
                listing.stderr
            )
            # Until `trials` reads the study, Optuna's tables may be half made, and the
            # dashboard's loader (it opens the storage with table creation) would race the
            # run's own creation of them; the run survives that race (`Store`'s retried open)
            if listing.returncode == 0:
                storage = storage or optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/tuner.db")
                study_id = storage.get_study_id_from_name("e2e")
                get_trials(InMemoryCache(), storage, study_id)
                reads += 2
        time.sleep(0.1)
    _, err = proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    assert "locked" not in err
    assert reads >= 4
    assert len(_trials(tmp_path)) == 3


def test_read_only_database_is_one_line(tmp_path: Path, tiny_model_dir) -> None:
    study = sim_study(tmp_path, tiny_model_dir)
    assert tuner("run", str(study), "--n-trials", "1", cwd=tmp_path).returncode == 0
    before = (tmp_path / "tuner.db").read_bytes()
    url = f"sqlite:///file:{tmp_path}/tuner.db?mode=ro&uri=true"
    run = tuner("run", str(study), "--storage", url, cwd=tmp_path)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "read-only" in run.stderr
    listing = tuner("trials", str(study), "--storage", url, cwd=tmp_path)  # readers still work
    assert listing.returncode == 0, listing.stderr
    assert (tmp_path / "tuner.db").read_bytes() == before


def _run_with_ports(tmp_path: Path, tiny_model_dir, monkeypatch, hand_out) -> tuple:
    """One trial of the sim study in-process, `free_port` replaced by `hand_out(n)`."""
    from tuner.engine import ports
    from tuner.run.loop import StudyLoop
    from tuner.runners.engine_runner import EngineRunner
    from tuner.spec.study import load_study_spec
    from tuner.store.storage import Store

    real_free_port = ports.free_port
    handed_out: list[int] = []

    def racy_free_port(host: str = "127.0.0.1") -> int:
        port = hand_out(len(handed_out)) or real_free_port(host)
        handed_out.append(port)
        return port

    monkeypatch.setattr(ports, "free_port", racy_free_port)
    spec = load_study_spec(sim_study(tmp_path, tiny_model_dir))
    store = Store(f"sqlite:///{tmp_path}/tuner.db")
    loop = StudyLoop(spec, store, EngineRunner(spec, tmp_path / "logs", store.url))
    try:
        loop.run(n_trials=1)
    finally:
        store.close()
    (trial,) = loop.study.get_trials()
    return trial, handed_out


def test_port_belongs_to_someone_else_is_retried_and_measured_on_its_own_engine(
    tmp_path: Path, tiny_model_dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another OpenAI-compatible server listens on the chosen port and answers at once: it is
    never measured; the engine's failed bind is port_in_use, and the retry measures the
    trial's own engine."""
    from foreign_server import foreign_server

    with foreign_server(tmp_path) as foreign:
        trial, handed_out = _run_with_ports(
            tmp_path, tiny_model_dir, monkeypatch, lambda n: foreign.port if n == 0 else None
        )
        assert foreign.posts == 0, "a request reached the foreign server"
    assert handed_out[0] == foreign.port and len(handed_out) == 2
    assert trial.user_attrs["completed"] == 16, trial.user_attrs
    assert trial.user_attrs["vllm_version"].startswith("sim-"), trial.user_attrs
    assert _no_engine_left(tmp_path)


def test_port_belongs_to_someone_else_on_every_attempt(
    tmp_path: Path, tiny_model_dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    from foreign_server import foreign_server

    with foreign_server(tmp_path) as foreign:
        trial, handed_out = _run_with_ports(
            tmp_path, tiny_model_dir, monkeypatch, lambda n: foreign.port
        )
        assert foreign.posts == 0, "a request reached the foreign server"
    assert handed_out == [foreign.port] * 3
    assert trial.user_attrs["failure_kind"] == "port_in_use", trial.user_attrs
    reason = trial.user_attrs["failure_reason"]
    assert f"127.0.0.1:{foreign.port} is held by another process (pid {foreign.pid} " in reason
    assert "completed" not in trial.user_attrs
    assert _no_engine_left(tmp_path)


def test_logs_of_two_databases_sharing_a_log_dir_stay_apart(tmp_path: Path, tiny_model_dir) -> None:
    """Two studies named alike in two SQLite files, one --log-dir: each keeps its own logs,
    and every stored log path is absolute."""
    study = sim_study(tmp_path, tiny_model_dir)
    paths = {}
    for db in ("a.db", "b.db"):
        run = tuner(
            "run", str(study), "--n-trials", "1", "--storage", f"sqlite:///{db}",
            "--log-dir", "logs", cwd=tmp_path,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        with sqlite3.connect(tmp_path / db) as conn:
            (row,) = conn.execute("SELECT log_path FROM tuner_trials").fetchall()
            (engine_row,) = conn.execute("SELECT log_path FROM tuner_engines").fetchall()
        (trial,) = optuna.load_study(study_name="e2e", storage=f"sqlite:///{tmp_path}/{db}").trials
        assert row[0] == engine_row[0] == trial.user_attrs["log_path"]
        paths[db] = Path(row[0])
    a, b = paths["a.db"], paths["b.db"]
    assert a.is_absolute() and b.is_absolute()
    assert a != b and a.parent != b.parent
    assert a.parent.parent == b.parent.parent == tmp_path / "logs"
    assert a.parent.name.startswith("e2e-") and a.name.startswith("trial-0000-")
    for log in (a, b):
        assert "Application startup complete" in log.read_text(), log


def _fill_with_rlimit(tmp_path: Path) -> tuple[dict, Path, object]:
    """Every file the tuner writes stops growing at 600 kB: writes past it fail with EFBIG
    (SIGXFSZ ignored), which SQLite reports as "disk I/O error". (400 kB filled the WAL
    before the first engine started once workers registered and claimed configs.)"""
    import resource

    def limit_file_size() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (600_000, 600_000))

    return {"preexec_fn": limit_file_size}, tmp_path / "tuner.db", lambda: None


def _fill_with_tmpfs(tmp_path: Path) -> tuple[dict, Path, object]:
    """The database on a 1 MiB tmpfs: a real ENOSPC, "database or disk is full"."""
    import os

    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)])
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")

    def make_room() -> None:
        subprocess.run(["mount", "-o", "remount,size=64m", str(mnt)], check=True)

    return {}, mnt / "tuner.db", make_room


@pytest.mark.parametrize("fill", [_fill_with_rlimit, _fill_with_tmpfs], ids=["rlimit", "tmpfs"])
def test_full_disk_mid_run_is_one_line_and_a_rerun_recovers(
    tmp_path: Path, tiny_model_dir, fill
) -> None:
    import re

    from tuner.engine.ports import port_is_free

    opts, db, make_room = fill(tmp_path)
    url = f"sqlite:///{db}"
    study = sim_study(tmp_path, tiny_model_dir, budget={"n_trials": 8})
    try:
        full = tuner("run", str(study), "--storage", url, cwd=tmp_path, **opts)
        assert full.returncode == 2, full.stderr[-3000:]
        assert "Traceback" not in full.stderr, full.stderr[-3000:]
        errors = [line for line in full.stderr.splitlines() if "tuner: error:" in line]
        assert len(errors) == 1 and full.stderr.rstrip().endswith(errors[0]), full.stderr
        assert re.search(r"storage full|cannot write the database", errors[0]), errors[0]
        logs = sorted((tmp_path / "runs").rglob("*.log"))
        assert logs, "the disk filled before any engine started"
        for log in logs:  # every engine that started is gone: its port is free again
            (port,) = re.findall(
                r"Starting vLLM API server on http://127.0.0.1:(\d+)", log.read_text()
            )
            assert port_is_free("127.0.0.1", int(port)), log

        make_room()
        again = tuner("run", str(study), "--storage", url, "--n-trials", "1", cwd=tmp_path)
        assert again.returncode == 0, again.stderr[-3000:]
        assert re.search(r"recovered interrupted trials? \d", again.stderr), again.stderr[-3000:]
        trials = optuna.load_study(study_name="e2e", storage=url).trials
        states = [t.state for t in trials]
        assert optuna.trial.TrialState.RUNNING not in states, states
        interrupted = [t for t in trials if t.user_attrs.get("failure_kind") == "interrupted"]
        assert interrupted and all(t.state == optuna.trial.TrialState.FAIL for t in interrupted)
        assert trials[-1].state == optuna.trial.TrialState.COMPLETE
        assert trials[-1].user_attrs["completed"] == 16
        with contextlib.closing(sqlite3.connect(db)) as conn:
            rows = conn.execute("SELECT identity, running FROM tuner_engines").fetchall()
        assert not any(running for _, running in rows)
        assert all(not group_members(json.loads(ident)["pgid"]) for ident, _ in rows)
    finally:
        mnt = tmp_path / "small"
        if mnt.is_dir():  # lazily: a connection of this process may still hold the file
            subprocess.run(["umount", "-l", str(mnt)])
