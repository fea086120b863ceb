"""Waiting in tests on a real signal, never on a sleep: a deadline that fails the test saying
what never happened, and the signals (a running engine in the database, the requests it has
served by its own /metrics)."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

_SERVING = re.compile(r"Starting vLLM API server on (http://[\w.:\[\]-]+)")


def wait_for(
    check: Callable[[], T],
    what: str,
    timeout_s: float,
    *,
    proc: subprocess.Popen | None = None,
    interval_s: float = 0.1,
) -> T:
    """Poll `check` until it returns something true, and return that. At the deadline, or
    when `proc` (the run being watched) exits first, fail the test saying `what` never
    happened; `proc` is then killed, and the end of its stderr is in the message."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        exited = proc is not None and proc.poll() is not None
        if exited or time.monotonic() >= deadline:
            why = "the run exited before" if exited else f"not within {timeout_s:g} s:"
            raise AssertionError(f"{why} {what}{_last_words(proc)}")
        time.sleep(interval_s)


def _last_words(proc: subprocess.Popen | None) -> str:
    if proc is None:
        return ""
    proc.kill()
    _, err = proc.communicate()
    return f" (run exit {proc.returncode}; stderr ends:\n{(err or '')[-3000:]})"


def running_engine_logs(url: str, trial: int | None = None) -> list[Path]:
    """The log files of the engines the database says are running (of one trial, if given);
    [] while the database or its tables do not exist yet."""
    import sqlalchemy as sa

    from tuner.store.schema import engines_table

    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return []  # connecting would create the file before the tuner does
    query = sa.select(engines_table.c.log_path).where(engines_table.c.running)
    if trial is not None:
        query = query.where(engines_table.c.trial_number == trial)
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [Path(p) for (p,) in conn.execute(query).all()]
    except sa.exc.DBAPIError:  # no tables yet
        return []
    finally:
        engine.dispose()


def engine_url(log_path: Path) -> str | None:
    """The base URL an engine said it serves on (vLLM's and `tuner sim serve`'s log line)."""
    try:
        found = _SERVING.search(log_path.read_text(errors="replace"))
    except OSError:
        return None
    return found.group(1) if found else None


def requests_served(log_path: Path) -> int:
    """The requests an engine has finished, by its own `vllm:request_success_total`; 0 while
    it does not answer yet."""
    import httpx

    from tuner.workload.engine_metrics import parse_samples

    base = engine_url(log_path)
    if base is None:
        return 0
    try:
        text = httpx.get(f"{base}/metrics", timeout=1.0).text
    except httpx.HTTPError:
        return 0
    return round(sum(parse_samples(text).get("vllm:request_success_total", [])))


def serving_engines(url: str, requests: int = 1, trial: int | None = None) -> list[Path]:
    """The running engines (their logs) that have served at least `requests` requests: the
    workload is under way on them."""
    return [log for log in running_engine_logs(url, trial) if requests_served(log) >= requests]
