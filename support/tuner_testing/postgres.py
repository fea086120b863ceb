"""A throw-away PostgreSQL for the multi-worker tests and benchmarks/scale_out.py, and the
workers that share it. Its programs are found (or installed: `make postgres`) by
`tuner_testing.postgres_env`; the tests' `postgres` fixture fails, never skips, without them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tuner_testing.cli import TUNER
from tuner_testing.postgres_env import PG_USER, postgres_missing, server_bin_dir, system_tool


class PostgresServer:
    """A PostgreSQL server in a temporary directory on 127.0.0.1 and a free port.

    As root it runs as the `postgres` system user (brief §8); otherwise as the current user.
    `url` is the SQLAlchemy URL with psycopg 3; `new_database()` gives each test its own.
    """

    def __init__(self) -> None:
        import tempfile

        from tuner.engine.ports import free_port

        bin_dir = server_bin_dir()
        if bin_dir is None:
            raise RuntimeError(postgres_missing())
        self.initdb, self.pg_ctl = str(bin_dir / "initdb"), str(bin_dir / "pg_ctl")
        self.dir = Path(tempfile.mkdtemp(prefix="tuner-pg-"))
        self.port = free_port("127.0.0.1")
        runuser = system_tool("runuser") or "runuser"
        self._as = [runuser, "-u", PG_USER, "--"] if os.geteuid() == 0 else []
        if self._as:
            shutil.chown(self.dir, user=PG_USER)
        self._databases = 0

    def start(self) -> PostgresServer:
        data = self.dir / "data"
        self._run(self.initdb, "-D", str(data), "-A", "trust", "-U", PG_USER)
        opts = f"-k {self.dir} -p {self.port} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = self.dir / "log"
        try:
            self._run(self.pg_ctl, "-D", str(data), "-o", opts, "-l", str(log), "-w", "start")
        except RuntimeError as exc:
            text = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{exc}\n{text}") from None
        return self

    def _run(self, *argv: str) -> None:
        """One server program (as the `postgres` user when root); its output on failure."""
        done = subprocess.run([*self._as, *argv], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}")

    def stop(self) -> None:
        subprocess.run(
            [*self._as, self.pg_ctl, "-D", str(self.dir / "data"), "-m", "immediate", "stop"],
            capture_output=True,
            timeout=120,
        )
        shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{PG_USER}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh, empty database on this server; its URL."""
        import sqlalchemy as sa

        self._databases += 1
        name = f"t{self._databases}_{os.getpid()}"
        engine = sa.create_engine(self.url(), isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        engine.dispose()
        return self.url(name)


def start_workers(
    study: Path,
    storage: str,
    n: int,
    cwd: Path,
    *,
    env: dict[str, str] | None = None,
    hosts: list[str] | None = None,
    args: tuple[str, ...] = (),
) -> list[subprocess.Popen]:
    """`n` × `tuner run STUDY --storage URL` at once, as n terminals (or n hosts: `hosts`
    gives each its `TUNER_HOST_ID`)."""
    procs = []
    for i in range(n):
        worker_env = {**os.environ, **(env or {})}
        if hosts:
            worker_env["TUNER_HOST_ID"] = hosts[i]
        procs.append(
            subprocess.Popen(
                [*TUNER, "run", str(study), "--storage", storage, *args],
                cwd=cwd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=worker_env,
            )
        )
    return procs
