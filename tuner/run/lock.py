"""Who runs a study: one process per SQLite study, many workers per server study.

- `StudyLock` (SQLite): one `tuner run` per study file at a time. A second is refused in one
  line (which names PostgreSQL for several workers); GPU slots (`--gpus`) run inside the one
  process. The lock names its owner the way trials do (boot id, pid and its start time): a lock
  whose owner is dead (kill -9, reboot) is taken over. The row's primary key makes taking it
  atomic.
- `Worker` (every backend): one row per worker (a process, or one GPU slot of it) in
  `tuner_workers`, with a heartbeat that a thread renews every `heartbeat_s()`. Survivors judge
  a worker dead by its heartbeat's age (`tuner.run.recovery.owner_alive`).
- `ConfigClaim`: one row in `tuner_claims` per config being measured, keyed by the config: no
  two workers measure one config at the same time; the second waits, then reuses the first one's
  result.

Why not Optuna's heartbeat (`RDBStorage(heartbeat_interval=...)`): it fails stale trials only
from `study.optimize` and `optuna.storages.fail_stale_trials`, knows nothing of a trial's engine
or its claim, and cannot tell a dead worker on this boot (its pid is gone) from a slow one;
docs/scale-out.md has the comparison.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime

import sqlalchemy as sa

from tuner.errors import KeyTaken, UserError
from tuner.run.recovery import heartbeat_s, host_id, owner_alive, this_process
from tuner.spec.values import Params
from tuner.store.driver_errors import inserting
from tuner.store.schema import claims_table, locks_table, workers_table
from tuner.store.storage import Store

log = logging.getLogger(__name__)
CLAIM_POLL_S = 0.25  # how often a worker waiting for a config's claim looks again


def _describe(owner: Mapping[str, object], since: float) -> str:
    when = datetime.fromtimestamp(since, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"pid {owner.get('pid')} on host {owner.get('host')}, since {when}"


class StudyLock:
    """The lock of one study in one database; a context manager."""

    def __init__(self, store: Store, study_name: str) -> None:
        self.store, self.study_name = store, study_name
        self.owner = this_process()

    def acquire(self) -> None:
        for _ in range(3):
            try:
                if self._try_acquire():
                    return
            except KeyTaken:
                continue  # another run inserted first: look again at who holds it
        raise UserError(f"could not take the lock of study {self.study_name!r}: try again")

    def _try_acquire(self) -> bool:
        where = locks_table.c.study_name == self.study_name
        with inserting(self.store.engine) as conn:
            row = conn.execute(sa.select(locks_table).where(where)).first()
            if row is not None and row.owner != self.owner and owner_alive(row.owner):
                raise UserError(
                    f"study {self.study_name!r} is already being run by "
                    f"{_describe(row.owner, row.acquired_at)}: wait for it or stop it; "
                    "for several workers on one study use PostgreSQL (--storage "
                    "postgresql+psycopg://...) or GPU slots in one run (--gpus)"
                )
            if row is not None:  # its owner died without giving it back (or it is ours)
                conn.execute(sa.delete(locks_table).where(where))
            conn.execute(
                sa.insert(locks_table).values(
                    study_name=self.study_name, owner=self.owner, acquired_at=time.time()
                )
            )
        return True

    def release(self) -> None:
        """Give the lock back, if it is still ours."""
        where = locks_table.c.study_name == self.study_name
        with self.store.engine.begin() as conn:
            row = conn.execute(sa.select(locks_table).where(where)).first()
            if row is not None and row.owner == self.owner:
                conn.execute(sa.delete(locks_table).where(where))

    def __enter__(self) -> StudyLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def takes_lock(store: Store) -> bool:
    """SQLite studies are run by one process at a time (docs/storage.md, "Several workers")."""
    return store.engine.dialect.name == "sqlite"


class Worker:
    """This worker's row in `tuner_workers`, its heartbeat thread, and its watchdog.

    Every `heartbeat_s()` the thread renews the row, then calls `watchdog` (the study loop's
    recovery of dead workers' trials): a survivor busy in a long trial still notices a dead
    worker within `stale_after_s() + heartbeat_s()`.
    """

    def __init__(self, store: Store, study_name: str, *, slot: str | None = None) -> None:
        self.store, self.study_name, self.slot = store, study_name, slot
        self.id = uuid.uuid4().hex
        self.host_id = host_id()
        self.owner = this_process(self.id)
        self.watchdog: Callable[[], None] = lambda: None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _where(self) -> sa.ColumnElement[bool]:
        return sa.and_(
            workers_table.c.study_name == self.study_name, workers_table.c.worker_id == self.id
        )

    def beat(self) -> None:
        """Renew the heartbeat; register again if a survivor judged this worker dead."""
        now = time.time()
        with self.store.engine.begin() as conn:
            done = conn.execute(
                sa.update(workers_table).where(self._where()), {"heartbeat_at": now}
            )
            if done.rowcount == 0:
                conn.execute(
                    sa.insert(workers_table).values(
                        study_name=self.study_name,
                        worker_id=self.id,
                        owner=self.owner,
                        host_id=self.host_id,
                        slot=self.slot,
                        started_at=now,
                        heartbeat_at=now,
                    )
                )

    def rank(self) -> int:
        """How many live workers of the study registered before this one (0: the first)."""
        c = workers_table.c
        with self.store.engine.connect() as conn:
            mine = conn.execute(sa.select(c.started_at).where(self._where())).scalar_one()
            earlier = sa.or_(
                c.started_at < mine, sa.and_(c.started_at == mine, c.worker_id < self.id)
            )
            return conn.execute(
                sa.select(sa.func.count()).where(c.study_name == self.study_name, earlier)
            ).scalar_one()

    def _run(self) -> None:
        period = heartbeat_s()
        while not self._stop.wait(period):
            try:
                self.beat()
                self.watchdog()
            except Exception as exc:  # a lost connection: try again next beat
                log.warning("worker %s: heartbeat failed: %s", self.id[:8], exc)

    def start(self) -> Worker:
        self.beat()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{self.id[:8]}")
        self._thread.daemon = True
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop beating and remove the row (a clean end: nothing of ours is RUNNING)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self.store.engine.begin() as conn:
            conn.execute(sa.delete(claims_table).where(claims_table.c.worker_id == self.id))
            conn.execute(sa.delete(workers_table).where(self._where()))

    def __enter__(self) -> Worker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def config_key(params: Params, host: str | None = None) -> str:
    """A config's claim key: its parameters (and, for a baseline, its host: each host
    measures vLLM's defaults once, and two hosts may do so at once)."""
    text = json.dumps([sorted(params.items()), host], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class ConfigClaim:
    """The claims of one worker: `hold(key, trial)` waits while another worker measures
    the same config, then holds it until the trial ends."""

    def __init__(self, store: Store, study_name: str, worker_id: str) -> None:
        self.store, self.study_name, self.worker_id = store, study_name, worker_id

    def _try(self, key: str, trial: int) -> bool:
        try:
            with inserting(self.store.engine) as conn:
                conn.execute(
                    sa.insert(claims_table).values(
                        study_name=self.study_name,
                        config_key=key,
                        trial_number=trial,
                        worker_id=self.worker_id,
                        claimed_at=time.time(),
                    )
                )
        except KeyTaken:
            return False
        return True

    @contextmanager
    def hold(
        self, key: str, trial: int, on_wait: Callable[[], None] = lambda: None
    ) -> Iterator[bool]:
        """Yields whether it had to wait (then the other worker's result may be there)."""
        waited = False
        while not self._try(key, trial):
            if not waited:
                on_wait()
            waited = True
            time.sleep(CLAIM_POLL_S)
        try:
            yield waited
        finally:
            with self.store.engine.begin() as conn:
                conn.execute(
                    sa.delete(claims_table).where(
                        claims_table.c.study_name == self.study_name,
                        claims_table.c.config_key == key,
                        claims_table.c.worker_id == self.worker_id,
                    )
                )
