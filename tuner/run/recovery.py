"""Recovery after a tuner died mid-trial (kill -9, power cut, reboot, a lost network).

Each trial records its owner (host, boot, pid, the kernel's start time of that pid, and the
worker it ran on); each engine its identity; each worker a heartbeat in `tuner_workers`
(`tuner.run.lock.Worker`). A later run, or a live worker's watchdog, ends the dead owner's
RUNNING trials as interrupted and stops its engines, checking identities so that nothing
else is ever signalled. On this boot the process decides; on another host the heartbeat does
(docs/scale-out.md, "Dead workers").
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

import optuna
import sqlalchemy as sa

from tuner import trial as tr
from tuner.engine.process import boot_id, start_ticks, stop_orphan
from tuner.errors import UserError
from tuner.store import optuna_adapter as adapter
from tuner.store.schema import claims_table, workers_table
from tuner.store.storage import Store
from tuner.trial.reading import frozen_trials
from tuner.trial.uptime import interrupted_engine_s

HOST_ENV = "TUNER_HOST_ID"  # declares the host whose baseline a worker's scores compare to
HEARTBEAT_ENV = "TUNER_HEARTBEAT_S"  # seconds between a worker's heartbeats
DEFAULT_HEARTBEAT_S = 10.0
# A worker whose heartbeat is this many periods old is dead: its trials are interrupted.
MISSED_BEATS = 4
# A RUNNING trial without an owner yet: `ask` created it and its worker has not written its
# owner (milliseconds later). Judged only once it is this old (a crashed run's, then).
OWNERLESS_GRACE_S = 60.0


def heartbeat_s() -> float:
    """The heartbeat period: `$TUNER_HEARTBEAT_S`, else 10 s."""
    text = os.environ.get(HEARTBEAT_ENV)
    if not text:
        return DEFAULT_HEARTBEAT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.05 <= value <= 3600:
        raise UserError(f"{HEARTBEAT_ENV}={text!r}: give seconds between 0.05 and 3600")
    return value


def stale_after_s() -> float:
    """How old a heartbeat may be before its worker is judged dead."""
    return MISSED_BEATS * heartbeat_s()


def host_id() -> str:
    """The host this worker measures on: `$TUNER_HOST_ID`, else the hostname. Trials are
    scored against the baseline of their own host (docs/scale-out.md, "Hosts")."""
    return os.environ.get(HOST_ENV) or socket.gethostname()


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


_PID_NS = _pid_namespace()  # e.g. "pid:[4026531836]": pids are comparable within one


def this_process(worker: str | None = None) -> dict[str, object]:
    """The owner identity recorded on every trial this process runs (and its worker's id)."""
    owner: dict[str, object] = {
        "host": socket.gethostname(),
        "boot_id": boot_id(),
        "pid": os.getpid(),
        "start_ticks": start_ticks(os.getpid()),
        "pid_ns": _PID_NS,
    }
    if worker is not None:
        owner["worker"] = worker
    return owner


def owner_alive(
    owner: Mapping[str, object] | None,
    heartbeats: Mapping[str, float] | None = None,
    now: float | None = None,
) -> bool:
    """Whether the tuner that owns a RUNNING trial may still be running.

    On this boot and in this PID namespace, the pid and the kernel's start time of that pid
    identify a process: alive exactly when they match, whatever the heartbeat says (a
    kill -9 is seen at once; a live process whose heartbeat thread is stuck on a slow
    database is not judged). The hostname identifies nothing (a new container each night has
    a new one on the same boot).

    Otherwise, a worker with a heartbeat row (`heartbeats`: worker id to its last beat, on
    its clock) is alive while that beat is younger than `stale_after_s()`: another host, or
    another container on this boot with a PID namespace of its own. Without one (a run from
    before workers had rows, or a worker whose row is gone):
    - another boot, same hostname: this machine rebooted since, so the owner is dead;
    - another boot and another hostname: another machine's run from before heartbeats, not
      ours to judge (docs/reliability.md, "Recovery"); a worker whose row is gone is dead.
    """
    if not owner:
        return False
    local = owner.get("boot_id") == boot_id()
    if local and owner.get("pid_ns", _PID_NS) == _PID_NS:
        return start_ticks(_pid(owner)) == owner.get("start_ticks")
    worker = owner.get("worker")
    if isinstance(worker, str) and heartbeats is not None:
        beat = heartbeats.get(worker)
        now = time.time() if now is None else now
        return beat is not None and now - beat <= stale_after_s()
    if local:  # another PID namespace, no heartbeat: as before heartbeats, by its pid
        return start_ticks(_pid(owner)) == owner.get("start_ticks")
    return owner.get("host") != socket.gethostname()


def _pid(owner: Mapping[str, object]) -> int:
    """The owner's pid (`this_process` stores an int)."""
    pid = owner["pid"]
    if not isinstance(pid, int | str):
        raise TypeError(f"an owner's pid is a number, not {pid!r}")
    return int(pid)


def heartbeats(store: Store, study_name: str) -> dict[str, float]:
    """Every registered worker of the study and its last heartbeat (its own clock)."""
    with store.engine.connect() as conn:
        rows = conn.execute(
            sa.select(workers_table.c.worker_id, workers_table.c.heartbeat_at).where(
                workers_table.c.study_name == study_name
            )
        ).all()
    return {r.worker_id: float(r.heartbeat_at) for r in rows}


@dataclass
class Recovered:
    interrupted: list[int] = field(default_factory=list)
    orphans_stopped: int = 0


def recover(study: optuna.Study, store: Store, *, retry: bool) -> Recovered:
    """Stop engines a dead tuner left behind; end its RUNNING trials as interrupted.

    With `retry`, each interrupted parameter set is enqueued once more (never a retry's retry).
    """
    out = Recovered()
    name = study.study_name
    beats, now = heartbeats(store, name), time.time()
    running = {t.number: t for t in frozen_trials(study, (optuna.trial.TrialState.RUNNING,))}
    stale = {n for n, t in running.items() if not _alive(t, beats, now)}
    ended_at = {n: _last_seen(running[n], beats) for n in stale}  # its engine died with it
    for number, identity in store.running_engines(study.study_name):
        if number in running and number not in stale:
            continue  # a live tuner's engine
        if stop_orphan(identity):
            out.orphans_stopped += 1
            ended_at[number] = now  # it ran until now (this boot: the trial's clock)
        store.engine_stopped(study.study_name, number)
    for number in sorted(stale):
        t = running[number]
        try:
            _interrupt(study, store, t, ended_at[number])
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another survivor ended it first
        out.interrupted.append(number)
        # An interrupted baseline is queued again by the loop itself (it is the next trial).
        queued = tr.record_of(t)
        if retry and queued.retry_of is None and not queued.baseline:
            again = tr.TrialRecord(retry_of=number, spec_id=queued.spec_id)  # its spec's work
            study.enqueue_trial(t.params, user_attrs=again.encode())
    _forget_dead_workers(store, name, beats, now)
    return out


def _alive(t: optuna.trial.FrozenTrial, beats: Mapping[str, float], now: float) -> bool:
    owner = tr.owner_of(t)
    if owner is None and t.datetime_start is not None:
        age_s = (datetime.now() - t.datetime_start).total_seconds()  # Optuna's local time
        return age_s < OWNERLESS_GRACE_S
    return owner_alive(owner, beats, now)


def _last_seen(t: optuna.trial.FrozenTrial, beats: Mapping[str, float]) -> float | None:
    """When a dead owner was last alive: its worker's last heartbeat (its own clock, as the
    trial's `engine_started_at`); None: unknown."""
    return beats.get((tr.owner_of(t) or {}).get("worker") or "")


def _interrupt(
    study: optuna.Study, store: Store, t: optuna.trial.FrozenTrial, ended_at: float | None
) -> None:
    """End a dead owner's RUNNING trial as interrupted, with the engine time it used until
    `ended_at` (`tuner.trial.uptime.interrupted_engine_s`); give back its config's claim."""
    store.delete_trial(study.study_name, t.number)  # whatever the dead run half-wrote
    trial = adapter.writable(study, t)
    owner = tr.owner_of(t) or {}
    if not owner.get("worker"):
        reason = "interrupted: the tuner stopped during this trial"
    else:
        reason = (
            f"interrupted: worker pid {owner.get('pid')} on host {owner.get('host')} stopped "
            f"its heartbeat during this trial"
        )
    started_at = tr.record_of(t).engine_started_at
    record = tr.TrialRecord(
        failure_kind=tr.FailureKind.INTERRUPTED.value,
        failure_reason=reason,
        engine_s=interrupted_engine_s(started_at, ended_at),
    )
    tr.write(trial, record)
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    with store.engine.begin() as conn:
        conn.execute(
            sa.delete(claims_table).where(
                claims_table.c.study_name == study.study_name,
                claims_table.c.trial_number == t.number,
            )
        )


def _forget_dead_workers(store: Store, name: str, beats: Mapping[str, float], now: float) -> None:
    """Drop the rows (and claims) of workers whose heartbeat stopped long ago."""
    dead = [w for w, beat in beats.items() if now - beat > stale_after_s()]
    if not dead:
        return
    with store.engine.begin() as conn:
        for table in (claims_table, workers_table):
            conn.execute(
                sa.delete(table).where(table.c.study_name == name, table.c.worker_id.in_(dead))
            )
