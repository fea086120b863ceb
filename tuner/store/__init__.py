"""The study database: Optuna's RDB storage plus the tuner's own tables, in one file or server.

A scored trial (from `tuner.run`) → Optuna's trial rows (params, values, attrs, constraints) +
our rows (its requests, its engine, locks, workers' heartbeats, config claims) → read back by
every command, read-only where the command only reads.

Modules:
- `storage`: `Store` (open or create, read-only opening, the spec a study ran under, one
  transaction per trial's request rows), `resolve_storage` (the `--storage` URL);
- `schema`: our tables and their schema version (`ensure_schema`);
- `driver_errors`: the drivers' errors (SQLAlchemy's, Optuna's storage's, sqlite3's, psycopg's)
  read in one place: a storage that cannot be opened, a key another process stored first
  (`KeyTaken`), a full disk;
- `optuna_adapter`: the one place that reaches past Optuna's public API, and why;
- `verifies`: the verify history, each `tuner verify` stored with its study.

What may be assumed: SQLite or PostgreSQL alike; a reader never writes; a trial's request
rows are written in the transaction that finishes it. What a trial's attrs mean is
`tuner.trial`'s, not this package's.
"""

from tuner.store.storage import DEFAULT_STORAGE, Store, resolve_storage, spec_of

__all__ = ["DEFAULT_STORAGE", "Store", "resolve_storage", "spec_of"]
