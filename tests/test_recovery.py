"""Recovery across hosts: another host's RUNNING trial is judged by its worker's heartbeat."""

from __future__ import annotations

import time
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa

from tuner import trial as tr
from tuner.run.recovery import owner_alive, recover, stale_after_s
from tuner.store import optuna_adapter as adapter
from tuner.store.schema import claims_table, workers_table
from tuner.store.storage import Store

ELSEWHERE = {"host": "box-b", "boot_id": "another-boot", "pid": 4242, "start_ticks": 1}


def _running_trial(store: Store, worker: str, beat_age_s: float) -> optuna.Study:
    study = optuna.create_study(study_name="s", storage=store.optuna)
    trial = study.ask()
    adapter.set_system_attr(study, trial, tr.OWNER, {**ELSEWHERE, "worker": worker})
    now = time.time()
    with store.engine.begin() as conn:
        conn.execute(
            sa.insert(workers_table).values(
                study_name="s",
                worker_id=worker,
                owner=ELSEWHERE,
                host_id="box-b",
                started_at=now - 1000,
                heartbeat_at=now - beat_age_s,
            )
        )
        conn.execute(
            sa.insert(claims_table).values(
                study_name="s", config_key="k", trial_number=0, worker_id=worker, claimed_at=now
            )
        )
    return study


@pytest.mark.parametrize(("beat_age_s", "dead"), [(0.0, False), (1000.0, True)])
def test_another_host_s_trial_is_interrupted_once_its_heartbeat_is_stale(
    tmp_path: Path, beat_age_s: float, dead: bool
) -> None:
    store = Store(f"sqlite:///{tmp_path}/t.db")
    study = _running_trial(store, "w1", beat_age_s)
    done = recover(study, store, retry=False)
    (t,) = study.get_trials()
    if not dead:  # a live worker elsewhere: not ours to judge
        assert done.interrupted == [] and t.state == optuna.trial.TrialState.RUNNING
        return
    assert done.interrupted == [0]
    assert t.state == optuna.trial.TrialState.FAIL
    assert t.user_attrs[tr.FAILURE_KIND] == "interrupted"
    assert "box-b stopped its heartbeat" in t.user_attrs[tr.FAILURE_REASON]
    with store.engine.connect() as conn:  # its claim and its row are gone
        assert conn.execute(sa.select(claims_table)).all() == []
        assert conn.execute(sa.select(workers_table)).all() == []
    assert recover(study, store, retry=False).interrupted == []  # once only
    store.close()


def test_owner_alive_by_heartbeat_age() -> None:
    owner = {**ELSEWHERE, "worker": "w"}
    now = 10_000.0
    assert owner_alive(owner, {"w": now - stale_after_s() / 2}, now)
    assert not owner_alive(owner, {"w": now - stale_after_s() - 1}, now)
    assert not owner_alive(owner, {}, now)  # its row is gone: judged dead already
    assert owner_alive(ELSEWHERE, None, now)  # no heartbeat known: another host's, left alone


def test_a_worker_in_another_pid_namespace_on_this_boot_is_judged_by_its_heartbeat() -> None:
    from tuner.engine.process import boot_id

    owner = {"host": "c2", "boot_id": boot_id(), "pid": 2**22 + 7, "start_ticks": 1}
    owner |= {"pid_ns": "pid:[1]", "worker": "w"}  # its pid means nothing in our namespace
    now = 10_000.0
    assert owner_alive(owner, {"w": now}, now)
    assert not owner_alive(owner, {"w": now - stale_after_s() - 1}, now)
    same_ns = {k: v for k, v in owner.items() if k != "pid_ns"}
    assert not owner_alive(same_ns, {"w": now}, now)  # our namespace: its pid is gone: dead
