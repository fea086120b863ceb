"""`make postgres`'s search for the server programs, and its refusal where it cannot install."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner_testing import postgres_env


def _server(bin_dir: Path, exes: tuple[str, ...] = postgres_env.SERVER_EXES) -> Path:
    bin_dir.mkdir(parents=True)
    for exe in exes:
        (bin_dir / exe).write_text("#!/bin/sh\n")
        (bin_dir / exe).chmod(0o755)
    return bin_dir


@pytest.fixture
def debian(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake /usr/lib/postgresql with 9.6, 15 and a 16 that lacks its `postgres`."""
    root = tmp_path / "usr/lib/postgresql"
    _server(root / "9.6/bin")
    _server(root / "15/bin")
    _server(root / "16/bin", ("initdb", "pg_ctl"))
    monkeypatch.setattr(postgres_env, "DEBIAN_BIN_GLOB", f"{root}/*/bin")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    return root


def test_the_newest_complete_debian_server_is_found_off_path(debian: Path) -> None:
    assert postgres_env.server_bin_dir() == debian / "15/bin"  # 15 > 9.6; 16 is incomplete


def test_initdb_on_path_wins_by_its_real_directory(
    debian: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = _server(tmp_path / "opt/pg/bin")
    links = tmp_path / "local/bin"
    links.mkdir(parents=True)
    (links / "initdb").symlink_to(own / "initdb")  # as this image's /usr/local/bin/initdb
    monkeypatch.setenv("PATH", str(links))
    assert postgres_env.server_bin_dir() == own


def test_no_server_and_no_way_to_install_is_one_line_not_a_skip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(postgres_env, "DEBIAN_BIN_GLOB", f"{tmp_path}/none/*/bin")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(postgres_env, "_SBIN", str(tmp_path))  # no apt-get either
    assert postgres_env.server_bin_dir() is None
    assert "make postgres" in (postgres_env.postgres_missing() or "")
    assert postgres_env.main() == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "apt-get cannot install one here" in err, err
