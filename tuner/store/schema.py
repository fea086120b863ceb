"""The tuner's own tables in the study database, and the version of their schema.

`tuner_schema` holds one row, `SCHEMA_VERSION`, the version of the `tuner_*` tables and of what
the tuner writes into Optuna's ids and attrs. A writer creates the tables and stamps the
version; every open checks it. The policy while tuner is unreleased (0.1.0): no migrations. A
database of any other version, or with our tables and no version row (an early development
build), is refused in one line with a hint, for readers and writers alike; a change to what is
stored bumps `SCHEMA_VERSION` (docs/storage.md, "Schema version").
"""

from __future__ import annotations

import time

import sqlalchemy as sa

from tuner import __version__
from tuner.errors import UserError

# 2: spec ids without the shims of earlier builds (no legacy id, no fields left out of the
# hash for the sake of older ids). 1 (or no version row): an earlier build of 0.1.0, refused.
SCHEMA_VERSION = 2
UNVERSIONED = 1  # our tables without a version row: written before the schema had a version

metadata = sa.MetaData()
HOST_ID_CHARS = 256  # `$TUNER_HOST_ID` at most (tuner.run.checks.check_host_id)
trials_table = sa.Table(
    "tuner_trials",
    metadata,
    sa.Column("study_name", sa.String(512), primary_key=True),
    sa.Column("trial_number", sa.Integer, primary_key=True),
    sa.Column("outcome", sa.String(32), nullable=False),
    sa.Column("argv", sa.JSON),
    sa.Column("env", sa.JSON),
    sa.Column("vllm_version", sa.String(128)),
    sa.Column("log_path", sa.Text),
    sa.Column("startup_s", sa.Float),
    sa.Column("workload_s", sa.Float),
    sa.Column("result", sa.JSON),
    sa.Column("created_at", sa.Float, nullable=False),
)
requests_table = sa.Table(
    "tuner_requests",
    metadata,
    sa.Column("study_name", sa.String(512), primary_key=True),
    sa.Column("trial_number", sa.Integer, primary_key=True),
    sa.Column("idx", sa.Integer, primary_key=True),
    sa.Column("prompt_len", sa.Integer),
    sa.Column("output_tokens", sa.Integer),
    sa.Column("success", sa.Boolean),
    sa.Column("ttft_s", sa.Float),
    sa.Column("latency_s", sa.Float),
    sa.Column("start_s", sa.Float),
    sa.Column("itl_s", sa.JSON),
    sa.Column("error", sa.Text),
)
engines_table = sa.Table(
    "tuner_engines",
    metadata,
    sa.Column("study_name", sa.String(512), primary_key=True),
    sa.Column("trial_number", sa.Integer, primary_key=True),
    sa.Column("identity", sa.JSON, nullable=False),
    sa.Column("log_path", sa.Text),
    sa.Column("running", sa.Boolean, nullable=False),
)
locks_table = sa.Table(  # one run per study at a time (tuner/run/lock.py)
    "tuner_locks",
    metadata,
    sa.Column("study_name", sa.String(512), primary_key=True),
    sa.Column("owner", sa.JSON, nullable=False),
    sa.Column("acquired_at", sa.Float, nullable=False),
)
workers_table = sa.Table(  # every worker of a study and its heartbeat (tuner/run/lock.py)
    "tuner_workers",
    metadata,
    sa.Column("study_name", sa.String(512), primary_key=True),
    sa.Column("worker_id", sa.String(64), primary_key=True),
    sa.Column("owner", sa.JSON, nullable=False),  # host, boot id, pid, start ticks
    sa.Column("host_id", sa.String(HOST_ID_CHARS), nullable=False),  # the host its baselines are of
    sa.Column("slot", sa.String(64)),  # its GPUs, when it runs on one slot of a box
    sa.Column("started_at", sa.Float, nullable=False),
    sa.Column("heartbeat_at", sa.Float, nullable=False),  # the worker's clock (time.time)
)
claims_table = sa.Table(  # configs being measured now: the key's uniqueness is the claim
    "tuner_claims",
    metadata,
    sa.Column("study_name", sa.String(512), primary_key=True),
    sa.Column("config_key", sa.String(64), primary_key=True),  # sha256 of the params
    sa.Column("trial_number", sa.Integer, nullable=False),
    sa.Column("worker_id", sa.String(64), nullable=False),
    sa.Column("claimed_at", sa.Float, nullable=False),
)
verifies_table = sa.Table(  # each `tuner verify` of a running engine (tuner/store/verifies.py)
    "tuner_verifies",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("study_name", sa.String(512), nullable=False, index=True),
    sa.Column("verified_at", sa.Float, nullable=False),  # unix s, when it ended
    sa.Column("trial_number", sa.Integer),  # the config it checked (the shipped one)
    sa.Column("base_url", sa.Text, nullable=False),
    sa.Column("verdict", sa.String(32), nullable=False),  # compare.Verdict.kind
    sa.Column("exit_code", sa.Integer, nullable=False),
    sa.Column("record", sa.JSON, nullable=False),  # `tuner verify --json`'s document
)
schema_table = sa.Table(
    "tuner_schema",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),  # always 1: the table has one row
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("tuner_version", sa.String(64)),  # the tuner that stamped it
    sa.Column("stamped_at", sa.Float),
)
DATA_TABLES = (trials_table, requests_table, engines_table)


def stored_version(conn: sa.Connection) -> tuple[int | None, str | None]:
    """The schema version of this database's tuner tables and the tuner that stamped it.

    (None, None): none of our tables (a new database, or one only Optuna wrote).
    (UNVERSIONED, None): our tables but no version row (before the schema had a version).
    """
    names = set(sa.inspect(conn).get_table_names())
    if schema_table.name in names:
        row = conn.execute(sa.select(schema_table.c.version, schema_table.c.tuner_version)).first()
        if row is not None:
            return int(row.version), row.tuner_version or "?"
    if any(t.name in names for t in DATA_TABLES):
        return UNVERSIONED, None
    return None, None


def ensure_schema(engine: sa.Engine, url: str, *, readonly: bool) -> int:
    """Check the tuner tables' version; writers also create and stamp them.

    A writer does all of it in one transaction, on SQLite under `BEGIN IMMEDIATE`, so two
    processes creating the same new database take turns. Returns the version now stored.
    """
    if readonly:
        with engine.connect() as conn:
            version, by = stored_version(conn)
        if version is not None:
            _refuse_other(url, version, by)
        return SCHEMA_VERSION
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        version, by = stored_version(conn)
        if version is not None:
            _refuse_other(url, version, by)
        metadata.create_all(conn)
        if version is None:
            conn.execute(sa.delete(schema_table))
            conn.execute(
                sa.insert(schema_table).values(
                    id=1, version=SCHEMA_VERSION, tuner_version=__version__, stamped_at=time.time()
                )
            )
        conn.commit()
    return SCHEMA_VERSION


def _refuse_other(url: str, version: int, by: str | None) -> None:
    if version < SCHEMA_VERSION:
        raise UserError(
            f"cannot open storage {url}: it was written by an earlier development build of "
            f"tuner (schema version {version}; this tuner {__version__} reads "
            f"{SCHEMA_VERSION}), whose stored ids it does not read: start a new database "
            "(--storage, or the study file's `storage:`)"
        )
    if version > SCHEMA_VERSION:
        raise UserError(
            f"cannot open storage {url}: it was written by a newer tuner (tuner {by}, "
            f"schema version {version}; this tuner {__version__} knows up to "
            f"{SCHEMA_VERSION}): upgrade tuner"
        )
