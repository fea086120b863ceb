"""The `tuner` CLI as a user runs it: one command to completion, or a run in the background."""

from __future__ import annotations

import atexit
import json
import locale
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]  # the checkout (studies/, search_spaces/)


TUNER = [sys.executable, "-m", "tuner.cli"]

# Set to run every `tuner(...)` as a fresh `python -m tuner.cli` instead of a fork of the
# zygote (tuner.testing.zygote): slower, and the same answers.
NO_ZYGOTE_ENV = "TUNER_TEST_NO_ZYGOTE"


def start_run(study: Path, cwd: Path, *args: str) -> subprocess.Popen:
    """`tuner run STUDY [ARGS]` in the background, as an operator's terminal would hold it."""
    return subprocess.Popen(
        [*TUNER, "run", str(study), *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def tuner(
    *args: str,
    cwd: Path,
    timeout: float = 300,
    env: dict[str, str] | None = None,
    input: str | None = None,  # subprocess.run's name
    **kw: Any,
) -> subprocess.CompletedProcess:
    """Run the `tuner` CLI as a user would, from `cwd`, and capture its output (text).

    A fork of the zygote when one is free (tuner.testing.zygote: the same process a fresh
    start gives, without its seconds of imports), else a fresh `python -m tuner.cli`.
    """
    if not kw and not os.environ.get(NO_ZYGOTE_ENV) and _ZYGOTE_LOCK.acquire(blocking=False):
        try:
            return _forked(list(args), cwd, timeout, env, input)
        finally:
            _ZYGOTE_LOCK.release()
    return subprocess.run(
        [*TUNER, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        input=input,
        **kw,
    )


_ZYGOTE_LOCK = threading.Lock()  # one request at a time; a second caller starts afresh
_zygote: subprocess.Popen | None = None


def _zygote_process() -> subprocess.Popen:
    global _zygote
    if _zygote is None or _zygote.poll() is not None:
        _zygote = subprocess.Popen(
            [sys.executable, "-m", "tuner.testing.zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        atexit.register(_zygote.stdin.close)  # type: ignore[union-attr]  # EOF: it exits
    return _zygote


def _answer(zygote: subprocess.Popen, timeout_s: float | None) -> dict | None:
    """The zygote's next answer line, or None when `timeout_s` passed first."""
    stdout = zygote.stdout
    assert stdout is not None
    if timeout_s is not None and not select.select([stdout], [], [], max(timeout_s, 0))[0]:
        return None
    line = stdout.readline()
    if not line:
        raise RuntimeError(f"the zygote died (exit code {zygote.wait()})")
    return json.loads(line)


def _forked(
    args: list[str], cwd: Path, timeout_s: float, env: dict | None, input_text: str | None
) -> subprocess.CompletedProcess:
    zygote = _zygote_process()
    encoding = locale.getpreferredencoding(False)  # what subprocess's text=True decodes with
    with tempfile.TemporaryDirectory(prefix="tuner-cli-") as tmp:
        paths = {name: os.path.join(tmp, name) for name in ("stdin", "stdout", "stderr")}
        Path(paths["stdin"]).write_text(input_text or "", encoding=encoding)
        for name in ("stdout", "stderr"):
            Path(paths[name]).touch()
        request = {
            "argv": args,
            "cwd": str(cwd),
            "env": dict(os.environ if env is None else env),
            **paths,
        }
        assert zygote.stdin is not None
        zygote.stdin.write(json.dumps(request) + "\n")
        pid = (_answer(zygote, None) or {})["pid"]
        done = _answer(zygote, timeout_s)
        if done is None:
            os.kill(pid, signal.SIGKILL)
            _answer(zygote, None)
        # newline=None: universal newlines, as subprocess's text mode reads a pipe
        out, err = (Path(paths[name]).read_text(encoding=encoding) for name in ("stdout", "stderr"))
    cmd = [*TUNER, *args]
    if done is None:
        raise subprocess.TimeoutExpired(cmd, timeout_s, output=out, stderr=err)
    return subprocess.CompletedProcess(cmd, done["returncode"], out, err)
