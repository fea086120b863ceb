"""Commands forked from a zygote (`tuner_testing.zygote`) instead of started afresh.

One zygote per profile and test process, started at its first use and ended when the process
exits (its stdin closes): `tuner` in the tuner's environment, for `tuner(...)`; `vllm` in
vLLM's CPU environment (`.venv-vllm`), for the tests that run vLLM's own programs
(`vllm_run`). A zygote serves one command at a time; a second caller meanwhile starts its
command afresh, which gives the same answer more slowly.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import locale
import os
import select
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from tuner_testing import zygote as _zygote_module

REPO = Path(__file__).resolve().parents[2]  # the checkout (studies/, search_spaces/)
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"

# Set to run every command afresh instead of as a fork of a zygote: slower, the same answers.
NO_ZYGOTE_ENV = "TUNER_TEST_NO_ZYGOTE"


class _Zygote:
    """The zygote process and its answers: JSON lines read from the pipe's raw fd (a
    buffered reader could hold the next answer where `select` cannot see it)."""

    def __init__(self, python: str, profile: str) -> None:
        # -P: the script's directory (this package's modules) does not shadow any import
        self.process = subprocess.Popen(
            [python, "-P", _zygote_module.__file__, profile],
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


_ZYGOTES: dict[tuple[str, str], _Zygote] = {}
_LOCKS = {profile: threading.Lock() for profile in ("tuner", "vllm")}


def _zygote(python: str, profile: str) -> _Zygote:
    key = (python, profile)
    if key not in _ZYGOTES or _ZYGOTES[key].process.poll() is not None:
        _ZYGOTES[key] = _Zygote(python, profile)
    return _ZYGOTES[key]


def run(
    python: str,
    profile: str,
    argv: Sequence[str],
    *,
    cwd: Path,
    timeout_s: float,
    env: dict[str, str] | None = None,
    input_text: str | None = None,
    cpus: Sequence[int] = (),
) -> subprocess.CompletedProcess | None:
    """`python ARGV` forked from `profile`'s zygote, its output captured as text, as
    `subprocess.run(..., capture_output=True, text=True)` gives it; None when the zygote is
    busy (another thread's command) or switched off: the caller starts the command afresh."""
    lock = _LOCKS[profile]
    if os.environ.get(NO_ZYGOTE_ENV) or not lock.acquire(blocking=False):
        return None
    try:
        return _forked(_zygote(python, profile), python, list(argv), cwd, timeout_s, env,
                       input_text, list(cpus))  # fmt: skip
    finally:
        lock.release()


def _forked(
    zygote: _Zygote,
    python: str,
    argv: list[str],
    cwd: Path,
    timeout_s: float,
    env: dict | None,
    input_text: str | None,
    cpus: list[int],
) -> subprocess.CompletedProcess:
    encoding = locale.getpreferredencoding(False)  # what subprocess's text=True decodes with
    with tempfile.TemporaryDirectory(prefix="tuner-cli-") as tmp:
        paths = {name: os.path.join(tmp, name) for name in ("stdin", "stdout", "stderr")}
        Path(paths["stdin"]).write_text(input_text or "", encoding=encoding)
        for name in ("stdout", "stderr"):
            Path(paths[name]).touch()
        request = {
            "argv": argv,
            "cwd": str(cwd),
            "env": dict(os.environ if env is None else env),
            "cpus": cpus,
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
    cmd = [python, *argv]
    if done is None:
        raise subprocess.TimeoutExpired(cmd, timeout_s, output=out, stderr=err)
    return subprocess.CompletedProcess(cmd, done["returncode"], out, err)


def command(
    python: str,
    profile: str,
    argv: Sequence[str],
    *,
    cwd: Path = REPO,
    timeout_s: float = 300,
    env: dict[str, str] | None = None,
    input_text: str | None = None,
    cpus: Sequence[int] = (),
) -> subprocess.CompletedProcess:
    """`python ARGV`, its output captured as text: forked from `profile`'s zygote when it is
    free, else started afresh (`cpus` then by `taskset -c`). The same answer either way."""
    forked = run(python, profile, argv, cwd=cwd, timeout_s=timeout_s, env=env,
                 input_text=input_text, cpus=cpus)  # fmt: skip
    if forked is not None:
        return forked
    taskset = ["taskset", "-c", ",".join(map(str, cpus))] if cpus else []
    return subprocess.run(
        [*taskset, python, *argv],
        cwd=cwd,
        env=env,
        input=input_text,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def vllm_run(
    argv: Sequence[str],
    *,
    cwd: Path = REPO,
    timeout_s: float = 300,
    env: dict[str, str] | None = None,
    cpus: Sequence[int] = (),
) -> subprocess.CompletedProcess:
    """A program of vLLM's environment, its output captured as text: `argv` as for
    `subprocess.run`, either its python (`[.venv-vllm/bin/python, "-c", CODE, ...]`) or one of
    its console scripts (`[.venv-vllm/bin/vllm, "bench", "serve", ...]`); `cpus` as
    `taskset -c`. Forked from the `vllm` zygote: the ~10 s of CPU that importing vLLM costs is
    paid once per test process, not per command."""
    program = Path(argv[0])
    as_python = list(argv[1:]) if program.name.startswith("python") else [str(program), *argv[1:]]
    return command(str(VLLM_PYTHON), "vllm", as_python, cwd=cwd, timeout_s=timeout_s, env=env,
                   cpus=cpus)  # fmt: skip
