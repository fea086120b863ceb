"""The database drivers' errors, read in one place: what SQLAlchemy, Optuna's RDB storage and
the drivers under them (sqlite3, psycopg) raise, turned into the tuner's words and errors.

Optuna wraps SQLAlchemy's error in `StorageInternalError`, SQLAlchemy wraps the driver's (its
`.orig`). No other module catches a driver's error or matches its text: opening a storage
(`Store`; a URL that is not one, `parsed_url`), an insert that another process won
(`inserting`: the run lock, a config's claim) and a full disk anywhere in a run
(`storage_full`, which the CLI asks) go through here.
"""

from __future__ import annotations

import errno
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import optuna
import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url

from tuner.errors import KeyTaken, UserError

DRIVER_ERRORS = (sa.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError)


def parsed_url(url: str) -> URL | None:
    """`url` as SQLAlchemy reads it; None when it is not a SQLAlchemy URL (SQLAlchemy's
    `ArgumentError`, which `Store` turns into one line and `tuner run`'s storage check leaves
    to it)."""
    try:
        return make_url(url)
    except sa.exc.ArgumentError:
        return None


_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)})
_FULL_DB = ("database or disk is full", "No space left on device", "could not extend file")
_RERUN = "free space and run again: the interrupted trial is then recovered"


def _unwrapped(exc: BaseException) -> BaseException:
    """SQLAlchemy's error under Optuna's `StorageInternalError`, when there is one."""
    if isinstance(exc, optuna.exceptions.StorageInternalError) and exc.__cause__ is not None:
        return exc.__cause__
    return exc


def _reason(exc: BaseException) -> str:
    """The driver's message (SQLAlchemy's `.orig`), else the error's own."""
    return str(getattr(exc, "orig", None) or exc)


def lost_creation_race(exc: BaseException) -> bool:
    """Whether `exc` is what the slower of two processes creating one database gets."""
    if isinstance(exc, optuna.exceptions.StorageInternalError) and exc.__cause__ is None:
        return False
    exc = _unwrapped(exc)
    reason = _reason(exc).lower()
    return isinstance(exc, sa.exc.SQLAlchemyError) and (
        "already exists" in reason
        or "unique constraint" in reason
        or "duplicate" in reason
        # SQLite: another creator held the write lock past the busy timeout (a loaded box)
        or "database is locked" in reason
    )


def open_error(url: str, exc: BaseException, readonly: bool) -> UserError:
    """The one line a storage that cannot be opened gives."""
    reason = _reason(_unwrapped(exc)).splitlines()[0]
    if "readonly" in reason or "read-only" in reason:
        reason = f"the database is read-only ({reason})"
    elif "not a database" in reason:
        reason = "not a database"
    elif readonly and "no such table" in reason:
        reason = f"not a study database ({reason})"
    return UserError(f"cannot open storage {url}: {reason}")


@contextmanager
def inserting(engine: sa.Engine) -> Iterator[sa.Connection]:
    """`engine.begin()`, where a row whose key another process stored first raises `KeyTaken`."""
    try:
        with engine.begin() as conn:
            yield conn
    except sa.exc.IntegrityError as exc:
        raise KeyTaken(_reason(exc).splitlines()[0]) from exc


def storage_full(exc: BaseException | None) -> str | None:
    """One line for an error that a full disk caused, anywhere in the exception's chain
    (Optuna wraps SQLAlchemy's error, which wraps the driver's); None for anything else.

    SQLite says "database or disk is full" on ENOSPC, and "disk I/O error" when a write fails
    otherwise (EFBIG: over a file size limit); PostgreSQL "could not extend file ...".
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS:
            where = f" {exc.filename}" if exc.filename else ""
            return f"cannot write{where}: disk full ({exc.strerror or exc}); {_RERUN}"
        if isinstance(exc, sqlite3.OperationalError) or type(exc).__name__ in (
            "OperationalError",
            "DiskFull",
        ):
            text = re.sub(r"^\([\w.]+\) ", "", (str(exc).splitlines() or [""])[0])
            if any(p in text for p in _FULL_DB):
                return f"storage full: cannot write the database ({text}); {_RERUN}"
            if "disk I/O error" in text:
                return f"cannot write the database: {text} (is the disk full?); {_RERUN}"
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return None
