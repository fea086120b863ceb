"""`tuner.cli.main`: errors a full disk causes end in one line and exit 2, not a traceback."""

from __future__ import annotations

import errno
import sqlite3

import optuna
import pytest
import sqlalchemy as sa

from tuner import cli
from tuner.store.driver_errors import storage_full


def _optuna_wrapped(message: str) -> BaseException:
    """As Optuna raises it: StorageInternalError from SQLAlchemy's error from the driver's."""
    try:
        try:
            try:
                raise sqlite3.OperationalError(message)
            except sqlite3.OperationalError as e:
                raise sa.exc.OperationalError("INSERT ...", {}, e) from e
        except sa.exc.OperationalError as e:
            raise optuna.exceptions.StorageInternalError("An exception is raised...") from e
    except optuna.exceptions.StorageInternalError as e:
        return e


def test_full_disk_errors_are_told_in_one_line() -> None:
    full = storage_full(_optuna_wrapped("database or disk is full"))
    assert full.startswith("storage full: cannot write the database (database or disk is full)")
    assert "sqlite3" not in full
    io = storage_full(_optuna_wrapped("disk I/O error"))
    assert io.startswith("cannot write the database: disk I/O error (is the disk full?)")
    enospc = OSError(errno.ENOSPC, "No space left on device", "/runs/trial-0001.log")
    assert storage_full(enospc).startswith(
        "cannot write /runs/trial-0001.log: disk full (No space left on device)"
    )
    assert storage_full(OSError(errno.EFBIG, "File too large")).startswith(
        "cannot write: disk full (File too large)"
    )
    try:  # the disk filled in Optuna's tell, then again in the trial's cleanup
        try:
            raise _optuna_wrapped("database or disk is full")
        except optuna.exceptions.StorageInternalError:
            raise _optuna_wrapped("database or disk is full")  # noqa: B904
    except optuna.exceptions.StorageInternalError as exc:
        assert storage_full(exc).startswith("storage full: ")
    try:
        try:
            raise _optuna_wrapped("database or disk is full")
        except optuna.exceptions.StorageInternalError:
            raise RuntimeError("unrelated") from None
    except RuntimeError as exc:
        assert storage_full(exc) is None  # `from None`: the context is dropped on purpose
    for other in (
        ValueError("x"),
        OSError(errno.EACCES, "Permission denied"),
        _optuna_wrapped("database is locked"),
    ):
        assert storage_full(other) is None


def test_full_disk_ends_main_with_exit_2_and_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    def full_app(**kw):
        raise _optuna_wrapped("database or disk is full")

    monkeypatch.setattr(cli, "app", full_app)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", "study.yaml"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tuner: error: storage full: ")

    def buggy_app(**kw):
        raise ValueError("a bug stays a traceback")

    monkeypatch.setattr(cli, "app", buggy_app)
    with pytest.raises(ValueError):
        cli.main(["run", "study.yaml"])
