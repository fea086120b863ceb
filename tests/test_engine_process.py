"""EngineProcess with plain Python children: readiness, stop escalation, group cleanup, orphans.

The children are real processes serving real HTTP on loopback; only the engine is a stand-in.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tuner.engine.failures import EngineStartFailed
from tuner.engine.ports import free_port, port_is_free, wait_port_free
from tuner.engine.process import EngineProcess, group_members, start_ticks, stop_orphan
from tuner.errors import UserError
from tuner.trial import FailureKind

FAKE_ENGINE = textwrap.dedent(
    """
    import json, os, signal, subprocess, sys, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    opts = json.loads(sys.argv[1])
    for name in opts.get("ignore", []):
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    print("fake engine starting", flush=True)
    print("affinity", sorted(os.sched_getaffinity(0)), flush=True)
    print("env", os.environ.get("FAKE_ENGINE_VAR"), flush=True)
    if opts.get("grandchild"):
        kid = [sys.executable, "-c", "import signal, time\\n"
               "signal.signal(signal.SIGINT, signal.SIG_IGN)\\ntime.sleep(600)"]
        print("grandchild", subprocess.Popen(kid).pid, flush=True)
    if "exit_code" in opts:
        print(opts.get("message", "fatal: something broke"), flush=True)
        sys.exit(opts["exit_code"])
    time.sleep(opts.get("delay_s", 0))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = {"/health": {}, "/version": {"version": "9.9.9-fake"},
                    "/v1/models": {"data": [{"id": "fake-model"}]}}.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.end_headers()
            self.wfile.write(json.dumps(body or {}).encode())

        def log_message(self, *args):
            pass

    ThreadingHTTPServer(("127.0.0.1", opts["port"]), Handler).serve_forever()
    """
)


@pytest.fixture
def fake_engine(tmp_path: Path):
    """Start the fake engine with options; every engine started is stopped at teardown."""
    script = tmp_path / "fake_engine.py"
    script.write_text(FAKE_ENGINE)
    started: list[EngineProcess] = []

    def start(**opts) -> tuple[EngineProcess, str]:
        port = free_port()
        argv = [sys.executable, str(script), json.dumps({"port": port, **opts})]
        log = tmp_path / f"engine-{len(started)}.log"
        proc = EngineProcess.start(argv, {"FAKE_ENGINE_VAR": "set-by-test"}, log)
        started.append(proc)
        return proc, f"http://127.0.0.1:{port}"

    yield start
    for proc in started:
        proc.stop(grace_s=1.0)


def wait_for_log(proc: EngineProcess, text: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in proc.read_log():
        assert time.monotonic() < deadline, f"{text!r} not in log: {proc.log_tail()}"
        time.sleep(0.02)


def assert_group_gone(pgid: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
    assert group_members(pgid) == []


def test_free_port_is_bindable_and_wait_port_free_sees_a_listener() -> None:
    port = free_port()
    assert port_is_free("127.0.0.1", port)
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        assert not port_is_free("127.0.0.1", port)
        assert wait_port_free("127.0.0.1", port, timeout_s=0.2) is False
    assert wait_port_free("127.0.0.1", port, timeout_s=1.0) is True


def test_ready_engine_reports_models_version_and_stops_cleanly(fake_engine) -> None:
    proc, url = fake_engine(delay_s=0.5)
    ticks: list[float] = []
    info = proc.wait_ready(url, timeout_s=20, on_tick=ticks.append)
    assert info.models == ["fake-model"]
    assert info.version == "9.9.9-fake"
    assert 0.5 <= info.startup_s < 20
    assert ticks, "on_tick is called while waiting"
    assert proc.poll() is None
    assert "env set-by-test" in proc.log_tail()
    port = int(url.rsplit(":", 1)[1])
    code = proc.stop()
    assert code == -signal.SIGINT or code == 1  # Python's default SIGINT handler exits 1
    assert_group_gone(proc.pgid)
    assert port_is_free("127.0.0.1", port)
    assert proc.stop() == code  # idempotent


def test_child_leads_its_own_session_and_group(fake_engine) -> None:
    proc, _ = fake_engine(delay_s=30)
    wait_for_log(proc, "fake engine starting")
    assert os.getpgid(proc.pid) == proc.pgid == proc.pid
    assert os.getsid(proc.pid) == proc.pid
    assert os.getpgid(proc.pid) != os.getpgid(0)


def test_sigint_ignored_escalates_to_sigterm_and_takes_the_grandchild(fake_engine) -> None:
    proc, _ = fake_engine(ignore=["SIGINT"], grandchild=True, delay_s=60)
    wait_for_log(proc, "grandchild")
    grandchild = int(proc.read_log().split("grandchild ")[1].split()[0])
    assert os.getpgid(grandchild) == proc.pgid
    t0 = time.monotonic()
    code = proc.stop(grace_s=0.5)
    assert code == -signal.SIGTERM
    assert time.monotonic() - t0 < 5
    assert_group_gone(proc.pgid)
    assert start_ticks(grandchild) is None or group_members(proc.pgid) == []


def test_sigint_and_sigterm_ignored_ends_with_sigkill(fake_engine) -> None:
    proc, _ = fake_engine(ignore=["SIGINT", "SIGTERM"], delay_s=60)
    wait_for_log(proc, "fake engine starting")
    assert proc.stop(grace_s=0.3) == -signal.SIGKILL
    assert_group_gone(proc.pgid)


def test_exit_before_ready_is_classified_from_the_log(fake_engine) -> None:
    proc, url = fake_engine(exit_code=3, message="fatal: the fake engine refuses to start")
    t0 = time.monotonic()
    with pytest.raises(EngineStartFailed) as err:
        proc.wait_ready(url, timeout_s=30)
    assert time.monotonic() - t0 < 10, "an exited engine is noticed at once, not at the timeout"
    failure = err.value.failure
    assert failure.kind == FailureKind.CRASHED
    assert "exit code 3" in failure.reason
    assert "the fake engine refuses to start" in failure.reason
    assert "fake engine starting" in failure.log_tail
    assert_group_gone(proc.pgid)


def test_exit_before_ready_with_known_message_gets_its_kind(fake_engine) -> None:
    proc, url = fake_engine(exit_code=1, message="ValueError: No common block size for 16. ")
    with pytest.raises(EngineStartFailed) as err:
        proc.wait_ready(url, timeout_s=30)
    assert err.value.failure.kind == "unsupported_block_size"


def test_startup_timeout_stops_the_whole_group(fake_engine) -> None:
    proc, url = fake_engine(delay_s=60, grandchild=True, ignore=["SIGINT"])
    wait_for_log(proc, "grandchild")
    with pytest.raises(EngineStartFailed) as err:
        proc.wait_ready(url, timeout_s=1.5, stop_grace_s=0.5)
    assert err.value.failure.kind == FailureKind.STARTUP_TIMEOUT
    assert_group_gone(proc.pgid)


def test_missing_command_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not found"):
        EngineProcess.start(["no-such-engine-cmd-xyz", "serve"], {}, tmp_path / "e.log")
    with pytest.raises(UserError, match="not found"):
        EngineProcess.start([str(tmp_path / "missing" / "vllm")], {}, tmp_path / "e.log")


def test_cpu_affinity_is_applied_before_exec(tmp_path: Path) -> None:
    core = max(os.sched_getaffinity(0))
    argv = [sys.executable, "-c", "import os; print('cpus', sorted(os.sched_getaffinity(0)))"]
    proc = EngineProcess.start(argv, {}, tmp_path / "e.log", cpu_affinity=[core])
    assert proc.popen.wait(timeout=10) == 0
    assert f"cpus [{core}]" in proc.read_log()


def test_stop_orphan_checks_identity_before_signalling(fake_engine) -> None:
    proc, _ = fake_engine(delay_s=60, grandchild=True)
    wait_for_log(proc, "grandchild")
    ident = json.loads(json.dumps(proc.identity()))  # survives a round trip through storage
    assert ident["pid"] == ident["pgid"] == proc.pid
    assert isinstance(ident["start_ticks"], int)
    assert stop_orphan({**ident, "start_ticks": ident["start_ticks"] + 1}) is False
    assert stop_orphan({**ident, "boot_id": "another-boot"}) is False
    assert group_members(proc.pgid), "a mismatched identity must not signal anything"
    assert stop_orphan(ident, grace_s=1.0) is True
    proc.popen.wait(timeout=5)
    assert_group_gone(proc.pgid)
    assert stop_orphan(ident) is False


def test_engine_dies_with_a_killed_tuner(tmp_path: Path) -> None:
    """kill -9 of the tuner: the parent-death signal stops the engine, stop_orphan the rest."""
    tuner = textwrap.dedent(
        f"""
        import json, sys, time
        from pathlib import Path
        from tuner.engine.process import EngineProcess
        argv = [sys.executable, "-c", "import time; time.sleep(600)"]
        proc = EngineProcess.start(argv, {{}}, Path({str(tmp_path / "engine.log")!r}))
        print(json.dumps(proc.identity()), flush=True)
        time.sleep(600)
        """
    )
    fake_tuner = subprocess.Popen([sys.executable, "-c", tuner], stdout=subprocess.PIPE, text=True)
    try:
        ident = json.loads(fake_tuner.stdout.readline())
        assert group_members(ident["pgid"])
        fake_tuner.kill()
        fake_tuner.wait(timeout=5)
        deadline = time.monotonic() + 5
        while group_members(ident["pgid"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert group_members(ident["pgid"]) == []
    finally:
        fake_tuner.kill()
        stop_orphan(ident, grace_s=0.5)


def _fake_engine_on(tmp_path: Path, port: int, **opts) -> EngineProcess:
    script = tmp_path / "fake_engine_on_port.py"
    script.write_text(FAKE_ENGINE)
    argv = [sys.executable, str(script), json.dumps({"port": port, **opts})]
    return EngineProcess.start(argv, {}, tmp_path / f"engine-{port}.log")


def test_port_belongs_to_someone_else_is_not_taken_for_the_engine(tmp_path: Path) -> None:
    """A foreign server answers /health and /v1/models on the engine's port at once; the
    engine's own bind then fails: port_in_use (retried by the runner), never ready."""
    from foreign_server import foreign_server

    with foreign_server(tmp_path, model="fake-model") as foreign:
        proc = _fake_engine_on(tmp_path, foreign.port, delay_s=1.0)
        try:
            with pytest.raises(EngineStartFailed) as err:
                proc.wait_ready(f"http://127.0.0.1:{foreign.port}", timeout_s=30)
        finally:
            proc.stop(grace_s=1.0)
        failure = err.value.failure
        assert failure.kind == FailureKind.PORT_IN_USE, failure
        assert "Address already in use" in failure.reason
        assert f"held by another process (pid {foreign.pid} " in failure.reason
        assert proc.ready_info is None and foreign.posts == 0


def test_port_belongs_to_someone_else_for_the_whole_startup(tmp_path: Path) -> None:
    """The engine never binds before the timeout while a foreign server answers: port_in_use
    naming the other process, not startup_timeout and not a ready engine."""
    from foreign_server import foreign_server

    with foreign_server(tmp_path, model="fake-model") as foreign:
        proc = _fake_engine_on(tmp_path, foreign.port, delay_s=60)
        t0 = time.monotonic()
        try:
            with pytest.raises(EngineStartFailed) as err:
                proc.wait_ready(f"http://127.0.0.1:{foreign.port}", timeout_s=2, stop_grace_s=0.5)
        finally:
            proc.stop(grace_s=0.5)
        assert time.monotonic() - t0 < 10
        failure = err.value.failure
        assert failure.kind == FailureKind.PORT_IN_USE, failure
        assert f"another process (pid {foreign.pid} " in failure.reason
        assert f"listens on 127.0.0.1:{foreign.port}, not the engine" in failure.reason
        assert_group_gone(proc.pgid)


def test_port_belongs_to_someone_else_until_the_engine_binds_it(tmp_path: Path) -> None:
    """A server that answered on the port and left before the engine bound it: the engine
    that binds it afterwards is ready, measured from its launch."""
    import threading

    from foreign_server import foreign_server

    with foreign_server(tmp_path, model="fake-model") as foreign:
        proc = _fake_engine_on(tmp_path, foreign.port, delay_s=2.0)
        threading.Timer(1.0, foreign.stop).start()  # probed, and refused, until then
        try:
            info = proc.wait_ready(f"http://127.0.0.1:{foreign.port}", timeout_s=30)
        finally:
            proc.stop(grace_s=1.0)
    assert info.version == "9.9.9-fake" and info.startup_s >= 2.0


def test_an_engine_started_with_sigint_ignored_still_stops_on_sigint(tmp_path: Path) -> None:
    """A tuner launched by a script in the background (`tuner run ... &`) has SIGINT ignored;
    its engines must not inherit that, or every stop waits out the grace before SIGTERM."""
    script = tmp_path / "fake_engine.py"
    script.write_text(FAKE_ENGINE)
    port = free_port()
    starter = textwrap.dedent(
        f"""
        import json, signal, sys
        from pathlib import Path
        from tuner.engine.process import EngineProcess
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a non-interactive shell's `&` does
        argv = [sys.executable, {str(script)!r}, json.dumps({{"port": {port}}})]
        proc = EngineProcess.start(argv, {{}}, Path({str(tmp_path / "engine.log")!r}))
        proc.wait_ready("http://127.0.0.1:{port}", timeout_s=20)
        print(proc.stop(grace_s=30.0))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", starter], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) in (-signal.SIGINT, 1)  # SIGINT did it, not SIGTERM
