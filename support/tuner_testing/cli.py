"""The `tuner` CLI as a user runs it: one command to completion, or a run in the background."""

from __future__ import annotations

import atexit
import contextlib
import json
import locale
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]  # the checkout (studies/, search_spaces/)


TUNER = [sys.executable, "-m", "tuner.cli"]

# Set to run every `tuner(...)` as a fresh `python -m tuner.cli` instead of a fork of the
# zygote (tuner_testing.zygote): slower, and the same answers.
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

    A fork of the zygote when one is free (tuner_testing.zygote: the same process a fresh
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


class _Zygote:
    """The zygote process and its answers: JSON lines read from the pipe's raw fd (a
    buffered reader could hold the next answer where `select` cannot see it)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tuner_testing.zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
        )
        self._buffer = b""
        atexit.register(self.process.stdin.close)  # type: ignore[union-attr]  # EOF: it exits

    def ask(self, request: dict) -> None:
        data = memoryview((json.dumps(request) + "\n").encode())
        fd = self.process.stdin.fileno()  # type: ignore[union-attr]
        while data:
            data = data[os.write(fd, data) :]

    def answer(self, timeout_s: float | None) -> dict | None:
        """The next answer, or None when `timeout_s` passed first."""
        fd = self.process.stdout.fileno()  # type: ignore[union-attr]
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            if deadline is not None:
                left_s = deadline - time.monotonic()
                if left_s <= 0 or not select.select([fd], [], [], left_s)[0]:
                    return None
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError(f"the zygote died (exit code {self.process.wait()})")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)


_zygote: _Zygote | None = None


def _zygote_process() -> _Zygote:
    global _zygote
    if _zygote is None or _zygote.process.poll() is not None:
        _zygote = _Zygote()
    return _zygote


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
        zygote.ask(request)
        pid = (zygote.answer(None) or {})["pid"]
        done = zygote.answer(timeout_s)
        if done is None:
            with contextlib.suppress(ProcessLookupError):  # it ended just now
                os.kill(pid, signal.SIGKILL)
            zygote.answer(None)
        # newline=None: universal newlines, as subprocess's text mode reads a pipe
        out, err = (Path(paths[name]).read_text(encoding=encoding) for name in ("stdout", "stderr"))
    cmd = [*TUNER, *args]
    if done is None:
        raise subprocess.TimeoutExpired(cmd, timeout_s, output=out, stderr=err)
    return subprocess.CompletedProcess(cmd, done["returncode"], out, err)
