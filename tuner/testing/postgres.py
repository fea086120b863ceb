"""A throw-away PostgreSQL for the multi-worker tests and benchmarks/scale_out.py, and the
workers that share it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tuner.testing.cli import TUNER

PG_USER = "postgres"  # the system user the server runs as (it refuses to run as root)


def postgres_missing() -> str | None:
    """Why a throw-away PostgreSQL cannot be started here, or None when it can."""
    import shutil

    for exe in ("initdb", "pg_ctl"):
        if shutil.which(exe) is None:
            return f"{exe} is not on PATH (Debian: apt-get install postgresql-15)"
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            return "running as root without runuser: cannot start PostgreSQL as another user"
        import pwd

        try:
            pwd.getpwnam(PG_USER)
        except KeyError:
            return f"running as root and no {PG_USER!r} system user to run PostgreSQL as"
    return None


class PostgresServer:
    """A PostgreSQL server in a temporary directory on 127.0.0.1 and a free port.

    As root it runs as the `postgres` system user (brief §8); otherwise as the current user.
    `url` is the SQLAlchemy URL with psycopg 3; `new_database()` gives each test its own.
    """

    def __init__(self) -> None:
        import tempfile

        from tuner.engine.ports import free_port

        self.dir = Path(tempfile.mkdtemp(prefix="tuner-pg-"))
        self.port = free_port("127.0.0.1")
        self._as = ["runuser", "-u", PG_USER, "--"] if os.geteuid() == 0 else []
        if self._as:
            import shutil

            shutil.chown(self.dir, user=PG_USER)
        self._databases = 0

    def start(self) -> PostgresServer:
        data = self.dir / "data"
        run = self._as
        subprocess.run(
            [*run, "initdb", "-D", str(data), "-A", "trust", "-U", PG_USER],
            check=True,
            capture_output=True,
            timeout=120,
        )
        opts = f"-k {self.dir} -p {self.port} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.dir / "log")
        subprocess.run(
            [*run, "pg_ctl", "-D", str(data), "-o", opts, "-l", log, "-w", "start"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        return self

    def stop(self) -> None:
        import shutil

        subprocess.run(
            [*self._as, "pg_ctl", "-D", str(self.dir / "data"), "-m", "immediate", "stop"],
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
