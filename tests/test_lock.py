"""One run per SQLite study: a live owner's lock is refused in one line (pointing to
PostgreSQL for several workers), a dead owner's taken over."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tuner.errors import UserError
from tuner.run.lock import StudyLock
from tuner.store.schema import locks_table
from tuner.store.storage import Store

HOLD = """
import sys, time
from tuner.run.lock import StudyLock
from tuner.store.storage import Store
lock = StudyLock(Store(sys.argv[1]), "s")
lock.acquire()
print("held", flush=True)
time.sleep(60)
"""


def test_a_second_concurrent_run_is_refused_with_who_holds_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, url], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        store = Store(url)
        with pytest.raises(UserError, match=rf"already being run by pid {holder.pid} on host") as e:
            StudyLock(store, "s").acquire()
        assert "use PostgreSQL" in str(e.value)  # a second worker on SQLite: where to go
        StudyLock(store, "other").acquire()  # another study is free
    finally:
        holder.kill()
        holder.wait()
    # Its owner is dead (kill -9 leaves the row): the next run takes the lock over.
    with StudyLock(store, "s"):
        with store.engine.connect() as conn:
            (row,) = conn.execute(locks_table.select().where(locks_table.c.study_name == "s"))
        assert row.owner["pid"] != holder.pid
    with store.engine.connect() as conn:
        assert conn.execute(locks_table.select().where(locks_table.c.study_name == "s")).all() == []
    store.close()


def test_two_runs_started_at_the_same_instant_one_wins(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    Store(url).close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", HOLD, url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and sum(p.poll() is not None for p in procs) < 1:
            time.sleep(0.1)
        lost = [p for p in procs if p.poll() is not None]
        assert len(lost) == 1, "exactly one of the two must be refused"
        assert "already being run" in lost[0].stderr.read()
        won = next(p for p in procs if p is not lost[0])
        assert won.stdout.readline().strip() == "held"
    finally:
        for p in procs:
            p.kill()
            p.wait()
