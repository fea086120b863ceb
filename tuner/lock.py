"""One run per study at a time: a lock row in the study's own database.

Two `tuner run` of one study on one box would launch engines on the same GPUs at once and
overrun the budget between them. So a run takes the study's lock before anything else (before
recovery, which must never judge a live run's trial), and gives it back when it ends. The
lock names its owner the way trials do (boot id, pid and its start time): a lock whose owner
is dead (kill -9, reboot) is taken over; a live owner's is refused in one line.

The row's primary key makes taking the lock atomic on SQLite and PostgreSQL alike: of two
runs started at the same instant, one inserts and the other sees its row.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from tuner.errors import UserError
from tuner.recovery import owner_alive, this_process
from tuner.store import Store
from tuner.store_schema import locks_table


def _describe(owner: dict[str, Any], since: float) -> str:
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
            except sa.exc.IntegrityError:
                continue  # another run inserted first: look again at who holds it
        raise UserError(f"could not take the lock of study {self.study_name!r}: try again")

    def _try_acquire(self) -> bool:
        where = locks_table.c.study_name == self.study_name
        with self.store.engine.begin() as conn:
            row = conn.execute(sa.select(locks_table).where(where)).first()
            if row is not None and row.owner != self.owner and owner_alive(row.owner):
                raise UserError(
                    f"study {self.study_name!r} is already being run by "
                    f"{_describe(row.owner, row.acquired_at)}: wait for it or stop it "
                    "(two runs of one study would share its GPUs and overrun its budget)"
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
