"""One engine child process: start it in its own process group, wait for it, stop all of it.

The same code runs real vLLM and `tuner sim serve`; nothing here knows which one it is.

- The child leads a new session (`start_new_session=True`), so its whole process tree (vLLM's
  API server, EngineCore and workers) is one process group that `stop()` signals at once, and
  the user's Ctrl-C at the terminal reaches the tuner only, which then stops the engine itself.
- On Linux the child gets a parent-death signal (SIGTERM) so it dies with the tuner, even after
  `kill -9` of the tuner. It is set by a tiny launcher (`python -I -c ...` that calls prctl and
  then execs the command), not by `preexec_fn`, which is unsafe in a process with threads
  (docs/engine.md says why). The signal reaches the direct child only; vLLM's API server then
  stops its own children. Whatever survives is found by the next tuner via `identity()` /
  `stop_orphan()`. Caveat: the signal follows the starting *thread*, not the process, so an
  engine must be started from a thread that outlives it (the main thread does).
- `identity()` records pid, pgid, the kernel's start time of the leader and the boot id, so a
  later tuner can stop an orphaned group without ever matching processes by name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

import httpx

from tuner.engine import ports, ready
from tuner.engine.failures import EngineStartFailed, classify_failure, port_taken, tail_lines
from tuner.errors import NotReady, UserError

DEFAULT_GRACE_S = 10.0
KILL_WAIT_S = 5.0
_POLL_S = 0.05
_LOG_READ_BYTES = 1 << 20

# Runs in the child before exec: parent-death signal, check the parent is still the one that
# started us (it may have died before prctl), CPU pinning, then become the engine. SIGINT is
# set back to its default: a tuner started in the background by a script (`tuner run ... &`
# in a non-interactive shell) inherits SIGINT ignored, exec keeps an ignored signal ignored,
# and an engine that ignores the stop's first signal costs every trial the whole grace.
_LAUNCHER = """\
import ctypes, os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
parent, cpus, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)
if os.getppid() != parent:
    sys.exit("tuner engine launcher: the tuner exited before the engine started")
if cpus:
    os.sched_setaffinity(0, [int(c) for c in cpus.split(",")])
os.execvp(argv[0], argv)
"""


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (field 3 is index 0)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """The kernel's start time of `pid` in clock ticks since boot (None if it does not exist)."""
    fields = _proc_stat(pid)
    return int(fields[19]) if fields else None


def boot_id() -> str | None:
    """This boot's id: start ticks are only comparable within one boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group `pgid`."""
    if not Path("/proc/self/stat").exists():  # not Linux: ask the kernel about the group
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    members = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _proc_stat(int(entry.name))
            if fields and fields[0] != "Z" and int(fields[2]) == pgid:
                members.append(int(entry.name))
    return members


def _stop_group(pgid: int, grace_s: float, reap: Callable[[], object]) -> None:
    """SIGINT, then SIGTERM, then SIGKILL to the group, each time until no member is left.

    `reap()` collects our own child's exit status, so it does not linger as a zombie.
    Members orphaned by the leader's death are reaped by init; we wait (bounded) for that
    too, so that afterwards `os.killpg(pgid, 0)` finds nothing.
    """
    for sig, wait_s in (
        (signal.SIGINT, grace_s),
        (signal.SIGTERM, grace_s),
        (signal.SIGKILL, KILL_WAIT_S),
    ):
        if _wait_group_gone(pgid, 0.0, reap):
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
        if _wait_group_gone(pgid, wait_s, reap):
            break
    _wait_group_reaped(pgid, KILL_WAIT_S, reap)


def _wait_group_gone(pgid: int, timeout_s: float, reap: Callable[[], object]) -> bool:
    """Wait until the group has no live member; False if some remain after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        reap()
        if not group_members(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S)


def _wait_group_reaped(pgid: int, timeout_s: float, reap: Callable[[], object]) -> None:
    """Wait until even the zombies of the group are reaped (init does it, here within ~2 s)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        reap()
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            pass
        time.sleep(_POLL_S)


def stop_orphan(identity: EngineIdentity, grace_s: float = DEFAULT_GRACE_S) -> bool:
    """Stop an engine group that a dead tuner left behind. True if something was stopped.

    The group is signalled only when it is provably the recorded one: same boot, and the
    process with the recorded pid either is gone or has the recorded start time. (A pid that
    leads a process group cannot be reused while any member of that group lives, so the
    members of a group whose leader is gone are still the engine's.)
    """
    pgid = int(identity["pgid"])
    if identity.get("boot_id") != boot_id():
        return False  # rebooted since: nothing of that run survives
    leader_ticks = start_ticks(int(identity["pid"]))
    if leader_ticks is not None and leader_ticks != identity.get("start_ticks"):
        return False  # the pid now belongs to another process
    if not group_members(pgid):
        return False
    _stop_group(pgid, grace_s, reap=lambda: None)
    return True


class EngineIdentity(TypedDict):
    """What a later tuner needs to stop an engine group safely (`EngineProcess.identity`),
    stored as JSON with the trial (`tuner.store.storage.Store.engine_started`)."""

    pid: int
    pgid: int
    start_ticks: int | None
    boot_id: str | None


class EngineProcess:
    """A running engine child. Create with `EngineProcess.start(...)`; always `stop()` it."""

    def __init__(
        self, popen: subprocess.Popen[bytes], argv: list[str], log_path: Path, started_at: float
    ) -> None:
        self.popen = popen
        self.argv = argv
        self.log_path = log_path
        self.started_at = started_at  # time.monotonic() just before launch
        self.start_ticks = start_ticks(popen.pid)
        self.ready_info: ready.ReadyInfo | None = None
        self._stopped = False

    @classmethod
    def start(
        cls,
        argv: list[str],
        env: dict[str, str],
        log_path: Path,
        *,
        cpu_affinity: list[int] | None = None,
        cwd: Path | str | None = None,
    ) -> EngineProcess:
        """Launch `argv` with `env` set on top of the tuner's environment; output to `log_path`.

        A command that does not exist is the user's mistake: UserError.
        """
        if not argv:
            raise UserError("the engine command is empty")
        child_env = {**os.environ, **env}
        command = argv[0]
        if cwd is not None and os.sep in command:
            command = str(Path(cwd, command))
        if shutil.which(command, path=child_env.get("PATH")) is None:
            raise UserError(f"engine command not found or not executable: {argv[0]}")
        log_path = Path(log_path)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        full_argv = list(argv)
        if sys.platform == "linux":
            cpus = ",".join(str(c) for c in cpu_affinity or [])
            full_argv = [sys.executable, "-I", "-c", _LAUNCHER, str(os.getpid()), cpus, *argv]
        elif cpu_affinity:
            raise UserError("CPU pinning (cpu_affinity) needs Linux")
        with log_path.open("wb") as log:
            started_at = time.monotonic()
            popen = subprocess.Popen(
                full_argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=child_env,
                cwd=cwd,
                start_new_session=True,
            )
        return cls(popen, list(argv), log_path, started_at)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def pgid(self) -> int:
        """The process group: the child leads its own session, so it equals the pid."""
        return self.popen.pid

    def identity(self) -> EngineIdentity:
        """What a later tuner needs to stop this group safely (JSON-serialisable)."""
        return {
            "pid": self.pid,
            "pgid": self.pgid,
            "start_ticks": self.start_ticks,
            "boot_id": boot_id(),
        }

    def poll(self) -> int | None:
        """The exit code once the child has exited (negative: killed by that signal), else None."""
        return self.popen.poll()

    def read_log(self) -> str:
        """The end of the log (its last MiB), decoded leniently."""
        try:
            with self.log_path.open("rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - _LOG_READ_BYTES))
                return f.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def log_tail(self, max_lines: int = 40) -> str:
        return tail_lines(self.read_log(), max_lines)

    def wait_ready(
        self,
        base_url: str,
        timeout_s: float,
        *,
        api_key: str | None = None,
        on_tick: Callable[[float], None] | None = None,
        stop_grace_s: float = DEFAULT_GRACE_S,
    ) -> ready.ReadyInfo:
        """Wait for `/health` and `/v1/models` answered by this engine; on exit or timeout
        stop the group and raise.

        The answer counts only when the port's listening socket belongs to a process of the
        engine's group (`ports.port_holder`): another server on the port is never taken for
        the engine. Raises EngineStartFailed with the classified failure (`startup_timeout`
        when the engine was still starting at `timeout_s`, counted from launch; `port_in_use`
        when another process listened on the port). `stop_grace_s` is the `stop()` grace
        used then.
        """
        url = httpx.URL(base_url)
        host, port = url.host, url.port or (443 if url.scheme == "https" else 80)

        def owned() -> bool:
            holder = ports.port_holder(host, port, group_members(self.pgid))
            return holder in (ports.OURS, ports.UNKNOWN)  # UNKNOWN: no /proc to ask

        remaining_s = timeout_s - (time.monotonic() - self.started_at)
        try:
            self.ready_info = ready.wait_ready(
                base_url,
                remaining_s,
                alive=lambda: self.poll() is None,
                started_at=self.started_at,
                api_key=api_key,
                on_tick=on_tick,
                owned=owned,
            )
        except NotReady as exc:
            members = group_members(self.pgid)
            foreign = exc.foreign or ports.port_holder(host, port, members) == ports.FOREIGN
            holders = ports.describe_holders(host, port, exclude=members) if foreign else ""
            self.stop(stop_grace_s)
            failure = classify_failure(
                self.read_log(),
                exit_code=self.poll(),
                timed_out=not exc.exited,
                timeout_s=timeout_s,
            )
            if foreign:
                failure = port_taken(failure, f"{host}:{port}", holders)
            raise EngineStartFailed(failure) from None
        return self.ready_info

    def stop(self, grace_s: float = DEFAULT_GRACE_S) -> int | None:
        """SIGINT, SIGTERM, then SIGKILL to the whole group, waiting `grace_s` between.

        Idempotent: once the group is gone it is never signalled again (its id could be
        reused by then). Afterwards no process of the group is left. Returns the exit code.
        """
        if not self._stopped:
            _stop_group(self.pgid, grace_s, reap=self.popen.poll)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=KILL_WAIT_S)
            self._stopped = not group_members(self.pgid)
        return self.popen.returncode

    def __enter__(self) -> EngineProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
