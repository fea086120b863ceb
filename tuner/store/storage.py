"""Storage: Optuna's own RDB storage for the study, plus our tables in the same database.

Optuna keeps params, values, constraints and metric attrs, so `optuna-dashboard` and the
`optuna` CLI work on the file. Our tables keep what Optuna has no place for: the exact argv and
environment, the engine's identity (to stop it after a tuner crash), the per-request records.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from tuner import trial as tr
from tuner.errors import UserError
from tuner.measure.records import RequestRecord
from tuner.spec.metric_keys import Direction
from tuner.spec.outputs import SQLITE_HEADER
from tuner.spec.study import StudySpec, stored_spec
from tuner.store.driver_errors import (
    DRIVER_ERRORS,
    lost_creation_race,
    open_error,
    parsed_url,
)
from tuner.store.schema import engines_table, ensure_schema, requests_table, trials_table

if TYPE_CHECKING:
    from tuner.engine.process import EngineIdentity

DEFAULT_STORAGE = "sqlite:///tuner.db"
SQLITE_BUSY_TIMEOUT_S = 60
# Two processes creating one new database at once: the loser of Optuna's table creation
# fails with "table ... already exists" or a UNIQUE constraint on its version rows; it
# tries again, and then finds the winner's tables.
OPEN_ATTEMPTS = 5


def resolve_storage(url: str | None = None) -> str:
    """`--storage`, else `TUNER_STORAGE`, else `sqlite:///tuner.db` in the working directory."""
    return url or os.environ.get("TUNER_STORAGE") or DEFAULT_STORAGE


def sqlite_file(url: str) -> Path | None:
    """The database file of a SQLite URL (`sqlite:///tuner.db` -> tuner.db, relative to the
    working directory as SQLite opens it); None for another database or an in-memory one."""
    parsed = make_url(url)
    if not parsed.drivername.startswith("sqlite") or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database.removeprefix("file:"))


def _check_sqlite_path(url: str, readonly: bool) -> None:
    path = sqlite_file(url)
    if path is None:
        return
    if not path.parent.is_dir():
        raise UserError(f"cannot open storage {url}: directory {path.parent} does not exist")
    if readonly and not path.is_file():
        raise UserError(f"no database at {path}: run the study first, or pass --storage")
    _check_sqlite_header(url, path, readonly)
    if readonly:
        return
    if path.exists() and not os.access(path, os.W_OK):
        raise UserError(f"cannot open storage {url}: the database file is read-only")
    if not os.access(path.parent, os.W_OK):
        raise UserError(f"cannot open storage {url}: directory {path.parent} is not writable")


def _check_sqlite_header(url: str, path: Path, readonly: bool) -> None:
    """A file that is there but is no SQLite database is refused before a driver reads it
    (SQLite would take a short text file for an empty database, and write over it)."""
    if not path.is_file():
        return
    try:
        with path.open("rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise UserError(f"cannot open storage {url}: {exc.strerror}") from None
    if not head:
        if readonly:  # a writer makes a new database in an empty file, as SQLite does
            raise UserError(f"cannot open storage {url}: {path} is empty, not a database")
    elif head != SQLITE_HEADER:
        raise UserError(f"cannot open storage {url}: {path} is not a database")


def _engine_kwargs(url: str) -> dict[str, object]:
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}
    return {"pool_pre_ping": True}


def _prepare_sqlite(engine: sa.Engine) -> None:
    """WAL lets readers (dashboard, `tuner trials`) work during a run without locking it out;
    a write probe turns a read-only database into an error now, not after the first trial."""
    if engine.dialect.name != "sqlite":
        return
    with engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA journal_mode=WAL")
        conn.exec_driver_sql("BEGIN IMMEDIATE")
        conn.exec_driver_sql("CREATE TABLE tuner_write_probe (x INTEGER)")
        conn.exec_driver_sql("ROLLBACK")


def _sync_normal(dbapi_connection: Any, _record: object) -> None:
    dbapi_connection.execute("PRAGMA synchronous=NORMAL")


def _sqlite_sync_normal(engine: sa.Engine) -> None:
    """SQLite's `synchronous=NORMAL` on every connection of `engine`: in WAL mode a commit
    then waits for no disk flush (a checkpoint does), and the database stays consistent
    whatever happens; what a power loss (not a crash of the tuner) may lose is the last
    commits (docs/storage.md). Optuna commits once per attr (about 50 per trial): with a
    flush each, `tuner plan` waited on the disk for a third of its time."""
    if engine.dialect.name != "sqlite":
        return
    sa.event.listen(engine, "connect", _sync_normal)
    engine.dispose()  # connections opened before: closed, opened again with it


class Store:
    """One database: the Optuna storage and the tuner's own tables."""

    def __init__(self, url: str | None = None, *, readonly: bool = False) -> None:
        """Open (and for writers, create) the database. Readers (`trials`, `best`, results)
        pass `readonly=True`: they work on a read-only file and never create one."""
        self.url = resolve_storage(url)
        if parsed_url(self.url) is None:
            raise UserError(f"cannot open storage {self.url!r}: not a SQLAlchemy URL")
        _check_sqlite_path(self.url, readonly)
        for attempt in range(OPEN_ATTEMPTS):
            try:
                self._open(readonly)
                break
            except DRIVER_ERRORS as exc:
                self._dispose()
                # a reader too: Optuna stamps alembic's version row when it opens a database
                # the writer is still creating (UNIQUE constraint on alembic_version)
                if attempt == OPEN_ATTEMPTS - 1 or not lost_creation_race(exc):
                    raise open_error(self.url, exc, readonly) from None
                time.sleep(0.05 * (attempt + 1))
            except (ImportError, ValueError, RuntimeError) as exc:
                self._dispose()
                raise open_error(self.url, exc, readonly) from None

    def _open(self, readonly: bool) -> None:
        self.engine = sa.create_engine(self.url, **_engine_kwargs(self.url))
        if not readonly:
            _prepare_sqlite(self.engine)
        self.optuna = optuna.storages.RDBStorage(
            self.url, engine_kwargs=_engine_kwargs(self.url), skip_table_creation=readonly
        )
        if not readonly:
            for engine in (self.engine, self.optuna.engine):
                _sqlite_sync_normal(engine)
        ensure_schema(self.engine, self.url, readonly=readonly)

    def _dispose(self) -> None:
        for owner in (self, getattr(self, "optuna", None)):
            engine = getattr(owner, "engine", None)
            if engine is not None:
                engine.dispose()

    # Studies -----------------------------------------------------------------------------

    def study_names(self) -> list[str]:
        return [s.study_name for s in optuna.get_all_study_summaries(self.optuna)]

    def load_study(self, name: str) -> optuna.Study:
        if name not in self.study_names():
            raise UserError(f"no study named {name!r} in {self.url}")
        return optuna.load_study(study_name=name, storage=self.optuna)

    def create_study(
        self,
        spec: StudySpec,
        name: str,
        sampler: optuna.samplers.BaseSampler,
        directions: list[Direction],
        metric_names: list[str],
        simulated: bool,
    ) -> optuna.Study:
        """Load the study if it exists (a re-run continues it), else create it with its spec."""
        study = optuna.create_study(
            study_name=name,
            storage=self.optuna,
            sampler=sampler,
            directions=directions,
            load_if_exists=True,
        )
        if tr.StudyRecord.of(study).spec is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                study.set_metric_names(metric_names)
            tr.create(study, spec.model_dump(), simulated)
        return study

    # Engines (for recovery after a tuner crash) -------------------------------------------

    def engine_started(
        self, study: str, trial: int, identity: EngineIdentity, log_path: str
    ) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                sa.delete(engines_table).where(
                    engines_table.c.study_name == study, engines_table.c.trial_number == trial
                )
            )
            conn.execute(
                sa.insert(engines_table).values(
                    study_name=study,
                    trial_number=trial,
                    identity=identity,
                    log_path=log_path,
                    running=True,
                )
            )

    def engine_stopped(self, study: str, trial: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                sa.update(engines_table)
                .where(
                    engines_table.c.study_name == study,
                    engines_table.c.trial_number == trial,
                )
                .values(running=False)
            )

    def running_engines(self, study: str) -> list[tuple[int, EngineIdentity]]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(engines_table.c.trial_number, engines_table.c.identity).where(
                    engines_table.c.study_name == study, engines_table.c.running.is_(True)
                )
            ).all()
        return [(r[0], r[1]) for r in rows]

    # Trials -------------------------------------------------------------------------------

    def save_trial(
        self,
        study: str,
        trial: int,
        outcome: str,
        *,
        argv: list[str] | None = None,
        env: dict[str, str] | None = None,
        vllm_version: str | None = None,
        log_path: str | None = None,
        startup_s: float | None = None,
        workload_s: float | None = None,
        result: dict[str, object] | None = None,
        records: Sequence[RequestRecord] = (),
    ) -> None:
        """The trial's row and its per-request records, in one transaction: all or nothing."""
        keys = {"study_name": study, "trial_number": trial}
        with self.engine.begin() as conn:
            self._delete_rows(conn, study, trial)
            conn.execute(
                sa.insert(trials_table).values(
                    **keys,
                    outcome=outcome,
                    argv=argv,
                    env=env,
                    vllm_version=vllm_version,
                    log_path=log_path,
                    startup_s=startup_s,
                    workload_s=workload_s,
                    result=result,
                    created_at=time.time(),
                )
            )
            if records:
                conn.execute(
                    sa.insert(requests_table),
                    [{**keys, "idx": i, **_record_row(r)} for i, r in enumerate(records)],
                )

    def delete_trial(self, study: str, trial: int) -> None:
        with self.engine.begin() as conn:
            self._delete_rows(conn, study, trial)

    @staticmethod
    def _delete_rows(conn: sa.Connection, study: str, trial: int) -> None:
        for table in (trials_table, requests_table):
            conn.execute(
                sa.delete(table).where(table.c.study_name == study, table.c.trial_number == trial)
            )

    def close(self) -> None:
        self.engine.dispose()
        self.optuna.engine.dispose()


def _record_row(r: RequestRecord) -> dict[str, object]:
    row = asdict(r)
    row.pop("generated_text")
    return row


def spec_of(study: optuna.Study) -> StudySpec:
    """The spec a study was created with (results never need the study file to match)."""
    data = tr.StudyRecord.of(study).spec
    if data is None:
        raise UserError(f"study {study.study_name!r} was not created by tuner")
    return stored_spec(data, study.study_name)
