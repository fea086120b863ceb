"""Storage: WAL, all-or-nothing trial rows, engine bookkeeping, storage errors."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tuner.errors import UserError
from tuner.records import RequestRecord
from tuner.store import Store, resolve_storage


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
    assert store.trial_row("s", 0)["result"] == {"x": 2}
    back = store.request_records("s", 0)
    assert len(back) == 1 and back[0].itl_s == [0.01, 0.02] and back[0].success
    store.close()


def test_failed_write_leaves_nothing(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/t.db")
    bad = [RequestRecord(prompt_len=1), RequestRecord(prompt_len=object())]  # not storable
    with pytest.raises(Exception):  # noqa: B017 - any driver error will do
        store.save_trial("s", 3, "measured", result={}, records=bad)
    assert store.trial_row("s", 3) is None
    assert store.request_records("s", 3) == []


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

    from tuner.config import StudySpec
    from tuner.store import spec_of

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
