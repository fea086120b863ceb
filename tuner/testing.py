"""Helpers for tests and benchmarks that drive the `tuner` CLI end to end (as `optuna.testing`).

The tests and the benchmarks in benchmarks/ build their study files and run the CLI with
these, so both exercise the same study. Nothing in the tuner itself imports this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent  # the checkout (studies/, search_spaces/)

TUNER = [sys.executable, "-m", "tuner.cli"]


def sim_study(
    tmp_path: Path,
    tokenizer: Path,
    *,
    flags: dict[str, Any] | None = None,
    workload: dict[str, Any] | list[dict[str, Any]] | None = None,
    **top: Any,
) -> Path:
    """A study over `tuner sim serve` (simulated 4×A6000, 32B model) with a short workload;
    `workload` as a list: those scenarios, as written."""
    data: dict[str, Any] = {
        "name": "e2e",
        "engine": {
            "command": ["{python}", "-m", "tuner.cli", "sim", "serve", "--model", "{model}"],
            "model": "deepseek-r1-distill-qwen-32b",
            "served_model_name": "qwen32b",
            "startup_timeout_s": 60,
            "flags": {
                "gpu": "a6000",
                "tensor-parallel-size": 4,
                "max-model-len": 8192,
                "tokenizer": str(tokenizer),
                **(flags or {}),
            },
            "export_drop_flags": ["tokenizer"],
        },
        "hardware": {"gpu": "a6000", "count": 4},
        "search_space": {
            "parameters": {
                "max-num-seqs": {"type": "int", "low": 8, "high": 256, "log": True, "default": 256},
                "max-num-batched-tokens": {
                    "type": "int",
                    "low": 256,
                    "high": 16384,
                    "log": True,
                    "default": 2048,
                },
                "gpu-memory-utilization": {
                    "type": "float",
                    "low": 0.7,
                    "high": 0.95,
                    "step": 0.05,
                    "default": 0.9,
                },
            }
        },
        "workload": {
            "tokenizer": str(tokenizer),
            "random_input_len": 128,
            "random_output_len": 16,
            "num_prompts": 16,
            "request_rate": 16,
            **(workload if isinstance(workload, dict) else {}),
        },
        "budget": {"n_trials": 3},
        "trial": {"stall_timeout_s": 5},
    }
    if isinstance(workload, list):
        data["workload"] = workload
    data.update(top)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def start_run(study: Path, cwd: Path) -> subprocess.Popen:
    """`tuner run STUDY` in the background, as an operator's terminal would hold it."""
    return subprocess.Popen(
        [*TUNER, "run", str(study)],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def tuner(*args: str, cwd: Path, timeout: float = 300, **kw: Any) -> subprocess.CompletedProcess:
    """Run the `tuner` CLI as a user would, from `cwd`, and capture its output."""
    return subprocess.run(
        [*TUNER, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, **kw
    )


def cpu_study(tmp_path: Path, model_dir: Path, vllm_python: Path, core: int, **top: Any) -> Path:
    """studies/cpu-tiny.yaml aimed at this test's model and vLLM, with a smaller workload."""
    data = yaml.safe_load((REPO / "studies" / "cpu-tiny.yaml").read_text())
    data["search_space"] = yaml.safe_load((REPO / "search_spaces" / "cpu-tiny.yaml").read_text())
    engine = data["engine"]
    engine["command"] = [str(vllm_python), *engine["command"][1:]]
    engine["model"] = str(model_dir)
    engine["cpu_affinity"] = [core]
    engine["env"] = {
        **engine.get("env", {}),
        "VLLM_CPU_OMP_THREADS_BIND": str(core),
        "VLLM_NO_USAGE_STATS": "1",
        "HF_HUB_OFFLINE": "1",
    }
    # Fixed lengths here (the shipped file varies them): the tests count exact tokens, and a
    # short, equal workload keeps each real-engine trial's run time predictable.
    data["workload"].update(
        num_prompts=16, random_output_len=16, random_range_ratio=0.0, num_warmups=1
    )
    data.update(top)
    path = tmp_path / "cpu-study.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@contextlib.contextmanager
def loopback_app(app: Any) -> Iterator[str]:
    """Serve an aiohttp `web.Application` on a free 127.0.0.1 port, in its own thread and
    event loop, for the block; yields its base URL. For tests of the client against servers
    that misbehave in ways `tuner sim serve` does not."""
    from aiohttp import web  # only the client tests need it

    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


# PostgreSQL for the multi-worker tests and benchmarks/scale_out.py -------------------------

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


# Several workers on one study: start them, and check what they stored -------------------


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


def launched(trials: list[Any]) -> list[Any]:
    """The trials that launched an engine (not a reused result, not refused before launch)."""
    return [
        t
        for t in trials
        if t.datetime_complete is not None
        and "reused_from" not in t.user_attrs
        and not t.user_attrs.get("predicted")
        and t.user_attrs.get("engine_s")
    ]


def counted(trials: list[Any]) -> int:
    """Trials that count toward `budget.n_trials`: ended, not interrupted, not reused."""
    return sum(
        1
        for t in trials
        if t.state.is_finished()
        and t.user_attrs.get("failure_kind") != "interrupted"
        and "reused_from" not in t.user_attrs
    )


def measured_at_once(trials: list[Any]) -> int:
    """Pairs of trials that measured one config at overlapping times (must be 0); two hosts'
    baselines are their own configs."""
    runs = launched(trials)
    pairs = 0
    for i, a in enumerate(runs):
        for b in runs[i + 1 :]:
            if a.params != b.params:
                continue
            if a.user_attrs.get("baseline") and a.user_attrs.get("host") != b.user_attrs.get(
                "host"
            ):
                continue
            if a.datetime_start < b.datetime_complete and b.datetime_start < a.datetime_complete:
                pairs += 1
    return pairs
