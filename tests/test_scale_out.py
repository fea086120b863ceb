"""Several workers on one PostgreSQL study, end to end on the simulated engine.

Each test starts real `tuner run` processes against a real PostgreSQL (the `postgres`
fixture; these tests are marked `postgres`). Heartbeats are fast here (`TUNER_HEARTBEAT_S`)
so that a dead worker is noticed within seconds.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa

from tuner.store.schema import claims_table, engines_table, workers_table
from tuner_testing import counted, measured_at_once, sim_study, start_workers, tuner
from tuner_testing.waiting import serving_engines, wait_for

pytestmark = pytest.mark.slow  # whole studies: `make test`, not `make test-fast`

FAST = {"TUNER_HEARTBEAT_S": "0.5"}  # a dead worker's trial is recovered within ~2.5 s
WORKER_TIMEOUT_S = 240


def _finish(procs: list) -> list[tuple[int, str]]:
    out = []
    for p in procs:
        _, err = p.communicate(timeout=WORKER_TIMEOUT_S)
        out.append((p.returncode, err))
    return out


def _trials(url: str) -> list[optuna.trial.FrozenTrial]:
    try:
        return optuna.load_study(study_name="e2e", storage=url).get_trials()
    except KeyError:  # not created yet
        return []


def _leftovers(url: str) -> dict[str, int]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        out = {
            "running engines": conn.execute(
                sa.select(sa.func.count()).where(engines_table.c.running)
            ).scalar_one(),
            "workers": conn.execute(
                sa.select(sa.func.count()).select_from(workers_table)
            ).scalar_one(),
            "claims": conn.execute(
                sa.select(sa.func.count()).select_from(claims_table)
            ).scalar_one(),
        }
    engine.dispose()
    return out


def test_three_workers_share_one_budget_and_never_measure_a_config_twice_at_once(
    postgres, tiny_model_dir: Path, tmp_path: Path
) -> None:
    url = postgres.new_database()
    n = 6
    study = sim_study(tmp_path, tiny_model_dir, budget={"n_trials": n})
    results = _finish(start_workers(study, url, 3, tmp_path, env=FAST))
    assert [code for code, _ in results] == [0, 0, 0], results
    trials = _trials(url)
    # Met, and exceeded by at most the other workers' trials in flight at the end.
    assert n <= counted(trials) <= n + 2
    assert measured_at_once(trials) == 0
    assert not [t.number for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    assert sum(1 for t in trials if t.user_attrs.get("baseline") and t.values) == 1
    assert _leftovers(url) == {"running engines": 0, "workers": 0, "claims": 0}


def test_a_killed_worker_s_trial_is_interrupted_and_the_survivors_finish_the_budget(
    postgres, tiny_model_dir: Path, tmp_path: Path
) -> None:
    url = postgres.new_database()
    n = 6
    study = sim_study(
        tmp_path,
        tiny_model_dir,
        budget={"n_trials": n},
        workload={"num_prompts": 48, "request_rate": 16},  # ~3 s of workload per trial
    )
    procs = start_workers(study, url, 3, tmp_path, env=FAST)
    victim = procs[1]

    def victim_mid_trial() -> optuna.trial.FrozenTrial | None:
        """The victim's running trial, once its engine has served a request of the workload."""
        for t in _trials(url):
            owner = t.system_attrs.get("tuner:owner") or {}
            mine = t.state == optuna.trial.TrialState.RUNNING and owner.get("pid") == victim.pid
            if mine and serving_engines(url, trial=t.number):
                return t
        return None

    what = "the victim mid-trial, its engine serving the workload"
    target = wait_for(victim_mid_trial, what, 120, proc=victim).number
    os.kill(victim.pid, signal.SIGKILL)
    killed_at = time.time()
    victim.wait()
    survivors = _finish([p for p in procs if p is not victim])
    assert [code for code, _ in survivors] == [0, 0], survivors
    trials = {t.number: t for t in _trials(url)}
    dead = trials[target]
    assert dead.state == optuna.trial.TrialState.FAIL
    assert dead.user_attrs["failure_kind"] == "interrupted"
    # Same boot: the survivors' heartbeat thread sees the pid gone within a beat or two.
    assert dead.datetime_complete.timestamp() - killed_at < 30
    assert n <= counted(list(trials.values())) <= n + 2  # its trial was given back
    assert measured_at_once(list(trials.values())) == 0
    assert not [t for t in trials.values() if t.state == optuna.trial.TrialState.RUNNING]
    assert _leftovers(url)["running engines"] == 0


def test_two_declared_hosts_each_measure_their_own_baseline(
    postgres, tiny_model_dir: Path, tmp_path: Path
) -> None:
    url = postgres.new_database()
    study = sim_study(tmp_path, tiny_model_dir, budget={"n_trials": 5})
    results = _finish(start_workers(study, url, 2, tmp_path, env=FAST, hosts=["box-a", "box-b"]))
    assert [code for code, _ in results] == [0, 0], results
    trials = _trials(url)
    baselines = {
        t.user_attrs["host"]: t.number for t in trials if t.user_attrs.get("baseline") and t.values
    }
    assert set(baselines) == {"box-a", "box-b"}
    for t in trials:  # every score is relative to its own host's baseline
        ref = t.user_attrs.get("reference_trial")
        if ref is not None and "reused_from" not in t.user_attrs:
            assert ref == baselines[t.user_attrs["host"]], (t.number, t.user_attrs)
    both = results[0][1] + results[1][1]
    assert "baselines by host" in both and "box-a" in both and "box-b" in both


def test_an_unreachable_postgresql_url_is_one_line(tiny_model_dir: Path, tmp_path: Path) -> None:
    from tuner.engine.ports import free_port

    study = sim_study(tmp_path, tiny_model_dir)
    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/postgres"
    run = tuner("run", str(study), "--storage", url, cwd=tmp_path, timeout=60)
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and "cannot open storage" in run.stderr, run.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--gpus", "0-1", "--gpus-per-trial", "4"), "more than the 2 GPU(s)"),
        (("--gpus", "3-1"), "runs backwards"),
        (("--gpus-per-trial", "2"), "needs gpus"),
    ],
)
def test_bad_gpu_slots_are_one_line(
    tiny_model_dir: Path, tmp_path: Path, args: tuple[str, ...], words: str
) -> None:
    study = sim_study(tmp_path, tiny_model_dir)
    run = tuner("run", str(study), *args, cwd=tmp_path, timeout=60)
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and words in run.stderr, run.stderr
    assert not (tmp_path / "tuner.db").exists()  # refused before anything was created
