"""Storage: WAL, all-or-nothing trial rows, engine bookkeeping, schema versions, storage errors."""

from __future__ import annotations

import multiprocessing
import os
import random
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
import sqlalchemy as sa

from tuner.errors import KeyTaken, UserError
from tuner.measure.records import RequestRecord
from tuner.store import schema as store_schema
from tuner.store.driver_errors import inserting
from tuner.store.storage import Store, resolve_storage
from tuner_testing import request_records, sim_study, trial_row, tuner


def test_resolve_storage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TUNER_STORAGE", raising=False)
    assert resolve_storage(None) == "sqlite:///tuner.db"
    monkeypatch.setenv("TUNER_STORAGE", "sqlite:///x.db")
    assert resolve_storage(None) == "sqlite:///x.db"
    assert resolve_storage("sqlite:///y.db") == "sqlite:///y.db"


def test_sqlite_is_in_wal_mode(tmp_path: Path) -> None:
    Store(f"sqlite:///{tmp_path}/t.db").close()
    mode = sqlite3.connect(tmp_path / "t.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_a_writer_commits_without_waiting_for_the_disk(tmp_path: Path) -> None:
    """synchronous=NORMAL (1) on the writer's connections, Optuna's too: WAL keeps the
    database consistent, and a commit waits for no flush (docs/reliability.md)."""
    store = Store(f"sqlite:///{tmp_path}/t.db")
    try:
        for engine in (store.engine, store.optuna.engine):
            with engine.connect() as conn:
                assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1
    finally:
        store.close()


def test_trial_rows_and_records_round_trip(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/t.db")
    records = [
        RequestRecord(
            prompt_len=5,
            success=True,
            output_tokens=3,
            ttft_s=0.1,
            itl_s=[0.01, 0.02],
            latency_s=0.2,
        ),
        RequestRecord(prompt_len=6, error="HTTP 500"),
    ]
    store.save_trial("s", 0, "measured", argv=["vllm", "serve"], result={"x": 1}, records=records)
    store.save_trial("s", 0, "measured", result={"x": 2}, records=records[:1])  # replaces
    assert trial_row(store, "s", 0)["result"] == {"x": 2}
    back = request_records(store, "s", 0)
    assert len(back) == 1 and back[0].itl_s == [0.01, 0.02] and back[0].success
    store.close()


def test_failed_write_leaves_nothing(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/t.db")
    bad = [RequestRecord(prompt_len=1), RequestRecord(prompt_len=object())]  # not storable
    with pytest.raises(Exception):  # noqa: B017 - any driver error will do
        store.save_trial("s", 3, "measured", result={}, records=bad)
    assert trial_row(store, "s", 3) is None
    assert request_records(store, "s", 3) == []


def test_engine_bookkeeping(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/t.db")
    store.engine_started("s", 1, {"pid": 1, "pgid": 1}, "log")
    assert store.running_engines("s") == [(1, {"pid": 1, "pgid": 1})]
    store.engine_stopped("s", 1)
    assert store.running_engines("s") == []


def test_storage_errors_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a SQLAlchemy URL"):
        Store("not a url")
    with pytest.raises(UserError, match="does not exist"):
        Store(f"sqlite:///{tmp_path}/missing/dir/t.db")
    db = tmp_path / "ro.db"
    Store(f"sqlite:///{db}").close()
    with pytest.raises(UserError, match="read-only"):
        Store(f"sqlite:///file:{db}?mode=ro&uri=true")


def test_the_stored_spec_reads_back_whole(tmp_path: Path) -> None:
    import math

    import optuna

    from tuner.spec.study import StudySpec
    from tuner.store.storage import spec_of

    spec = StudySpec.model_validate(
        {
            "name": "s",
            "engine": {"model": "m", "flags": {"enforce-eager": True}},
            "search_space": {"parameters": {"max-num-seqs": {"type": "int", "low": 1, "high": 8}}},
            "workload": {"request_rate": "inf"},
        }
    )
    store = Store(f"sqlite:///{tmp_path}/t.db")
    store.create_study(spec, "s", optuna.samplers.RandomSampler(), ["minimize"], ["score"], False)
    back = spec_of(Store(f"sqlite:///{tmp_path}/t.db", readonly=True).load_study("s"))
    assert math.isinf(back.workload.request_rate)
    assert back == spec


def _schema_rows(db: Path) -> list[tuple[int, str]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT version, tuner_version FROM tuner_schema").fetchall()


def _set_version(db: Path, sql: str) -> None:
    # closed here, not when the garbage collector gets to it: the database is in WAL mode and
    # its last connection to close checkpoints the WAL into the file, so a connection left
    # open would write the file later, in the middle of a test that says nothing was written
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute(sql)


def test_a_new_database_is_stamped_with_the_schema_version(tmp_path: Path) -> None:
    Store(f"sqlite:///{tmp_path}/t.db").close()
    Store(f"sqlite:///{tmp_path}/t.db").close()  # a second open leaves one row
    from tuner import __version__

    assert _schema_rows(tmp_path / "t.db") == [(store_schema.SCHEMA_VERSION, __version__)]


def test_a_database_from_a_newer_tuner_is_refused_in_one_line(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    Store(f"sqlite:///{db}").close()
    _set_version(db, f"UPDATE tuner_schema SET version = {store_schema.SCHEMA_VERSION + 1}")
    for readonly in (False, True):
        with pytest.raises(UserError, match="newer tuner") as err:
            Store(f"sqlite:///{db}", readonly=readonly)
        assert "\n" not in str(err.value) and "upgrade tuner" in str(err.value)
    assert _schema_rows(db)[0][0] == store_schema.SCHEMA_VERSION + 1  # left as it was


@pytest.mark.parametrize("earlier", ["version 1", "no version row"])
def test_a_database_of_an_earlier_build_is_refused_in_one_line(
    tmp_path: Path, earlier: str
) -> None:
    """No migrations while tuner is unreleased: a database an earlier build of 0.1.0 wrote
    (schema version 1, or tuner tables from before the version row) is refused by readers and
    writers alike, with a hint, and left as it was."""
    db = tmp_path / "t.db"
    store = Store(f"sqlite:///{db}")
    store.save_trial("s", 0, "measured", result={"x": 1})
    store.close()
    if earlier == "version 1":
        _set_version(db, "UPDATE tuner_schema SET version = 1")
    else:
        _set_version(db, "DROP TABLE tuner_schema")
    before = db.read_bytes()
    for readonly in (False, True):
        with pytest.raises(UserError, match="earlier development build") as err:
            Store(f"sqlite:///{db}", readonly=readonly)
        text = str(err.value)
        assert "\n" not in text and "schema version 1" in text and "start a new database" in text
    assert db.read_bytes() == before  # nothing written


def _open_at_once(url: str, barrier, results) -> None:
    barrier.wait()
    try:
        Store(url).close()
        results.put("ok")
    except BaseException as exc:
        results.put(repr(exc))


def test_processes_creating_one_new_database_at_once_all_succeed(tmp_path: Path) -> None:
    """Without the retry the slower ones fail in Optuna's table creation ("table studies
    already exists", "UNIQUE constraint failed: alembic_version.version_num")."""
    ctx = multiprocessing.get_context("fork")
    for round_ in range(4):
        url = f"sqlite:///{tmp_path}/race{round_}.db"
        barrier, results = ctx.Barrier(3), ctx.Queue()
        procs = [ctx.Process(target=_open_at_once, args=(url, barrier, results)) for _ in "abc"]
        for p in procs:
            p.start()
        outcomes = [results.get(timeout=120) for _ in procs]
        for p in procs:
            p.join()
        assert outcomes == ["ok"] * 3
        assert [v for v, _ in _schema_rows(tmp_path / f"race{round_}.db")] == [
            store_schema.SCHEMA_VERSION
        ]


@pytest.mark.parametrize(
    "content",
    # seeded: every pytest-xdist worker must collect the same test ids (`make test`)
    [random.Random(0).randbytes(4096), b"hello, not sqlite", b"SQLite format 2\x00" + bytes(100)],
    ids=["random-bytes", "text", "sqlite-2"],
)
@pytest.mark.parametrize("readonly", [False, True])
def test_a_file_that_is_not_a_database_is_one_user_error(
    tmp_path: Path, content: bytes, readonly: bool
) -> None:
    db = tmp_path / "t.db"
    db.write_bytes(content)
    with pytest.raises(UserError, match="not a database") as err:
        Store(f"sqlite:///{db}", readonly=readonly)
    assert "\n" not in str(err.value)
    assert db.read_bytes() == content  # never written over


def test_an_empty_file_is_no_database_for_readers_and_a_new_one_for_writers(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"
    db.touch()
    with pytest.raises(UserError, match="is empty, not a database"):
        Store(f"sqlite:///{db}", readonly=True)
    Store(f"sqlite:///{db}").close()
    assert [v for v, _ in _schema_rows(db)] == [store_schema.SCHEMA_VERSION]


def test_a_sqlite_file_without_a_study_is_one_user_error_for_readers(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE unrelated (x INTEGER)")
    with pytest.raises(UserError, match="not a study database"):
        Store(f"sqlite:///{db}", readonly=True)


def test_the_cli_says_a_garbage_database_in_one_line(tiny_model_dir: Path, tmp_path: Path) -> None:
    study = sim_study(tmp_path, tiny_model_dir)  # a real tokenizer: it is checked before storage
    (tmp_path / "tuner.db").write_bytes(os.urandom(2048))
    for command in ("run", "trials"):
        done = tuner(command, str(study), cwd=tmp_path, timeout=120)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert "not a database" in done.stderr


def test_a_reader_that_meets_the_writer_creating_the_database_tries_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`tuner trials` polled while `tuner run` creates the database: Optuna's version check
    in the reader stamps alembic's row the writer is stamping (seen in a fresh-clone run,
    `test_readers_during_a_run_do_not_lock_it_out`); the reader tries again, as a writer does."""
    url = f"sqlite:///{tmp_path}/t.db"
    Store(url).close()
    real_open, calls = Store._open, []

    def racing_open(self: Store, readonly: bool) -> None:
        calls.append(readonly)
        if len(calls) == 1:
            orig = sqlite3.IntegrityError("UNIQUE constraint failed: alembic_version.version_num")
            raise sa.exc.IntegrityError("INSERT INTO alembic_version", {}, orig)
        real_open(self, readonly)

    monkeypatch.setattr(Store, "_open", racing_open)
    Store(url, readonly=True).close()
    assert calls == [True, True]


def test_an_insert_another_process_won_is_key_taken(tmp_path: Path) -> None:
    """The driver's unique-key error is mapped once (`driver_errors.inserting`): the run lock
    and a config's claim catch the tuner's `KeyTaken`, never SQLAlchemy's IntegrityError."""
    store = Store(f"sqlite:///{tmp_path}/t.db")
    row = {"study_name": "s", "config_key": "k", "trial_number": 0, "worker_id": "w"}
    insert = sa.insert(store_schema.claims_table).values(**row, claimed_at=0.0)
    with inserting(store.engine) as conn:
        conn.execute(insert)
    with pytest.raises(KeyTaken, match="UNIQUE constraint failed"), inserting(store.engine) as conn:
        conn.execute(insert)
    store.close()
