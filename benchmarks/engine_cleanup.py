"""Engine figures of docs/engine.md that the tests only check, measured on vLLM's CPU build.

1. The ownership check's cost: `port_holder(host, port, group_members(pgid))`, what readiness
   runs once per poll that got an answer (a scan of /proc), timed `--checks` times.
2. A foreign OpenAI-compatible server already on the engine's port: how long after launch a
   real vLLM fails as `port_in_use` (its bind fails), with no request sent to the other server.
3. `kill -9` of the process that started a ready vLLM: how long until the engine's whole
   process group (API server, EngineCore, worker) is gone (the parent-death SIGTERM), and
   whether the port is free then.

vLLM: the tiny model, brief §5 flags with --enforce-eager, pinned to the last core; runs one at
a time, `--repeats` each. The 1-minute load average is printed beside every run.

Usage: .venv/bin/python benchmarks/engine_cleanup.py [--repeats 3] [--checks 200]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tuner.engine import ports
from tuner.engine.failures import EngineStartFailed
from tuner.engine.process import EngineProcess, group_members, stop_orphan
from tuner.tools.tinymodel import make_tiny_model

REPO = Path(__file__).resolve().parent.parent
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
CORE = max(os.sched_getaffinity(0))
FLAGS = (
    "--load-format dummy --dtype bfloat16 --max-model-len 1024 --max-num-batched-tokens 1024 "
    "--max-num-seqs 8 --block-size 32 --enforce-eager"
).split()
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": str(CORE), "HF_HUB_OFFLINE": "1"}

# The tuner that gets kill -9: starts the engine, says who it is once ready, then waits.
FAKE_TUNER = """
import json, sys, time
from pathlib import Path
from tuner.engine.process import EngineProcess
argv, env, log, url, core = json.loads(sys.argv[1])
engine = EngineProcess.start(argv, env, Path(log), cpu_affinity=[core])
engine.wait_ready(url, 300)
print(json.dumps(engine.identity()), flush=True)
time.sleep(600)
"""


def vllm_argv(model: Path, port: int) -> list[str]:
    return [
        str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
        "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port), *FLAGS,
    ]  # fmt: skip


def summary(name: str, values: list[float], unit: str = "s") -> str:
    return (
        f"== {name}: median {statistics.median(values):.3g} {unit} "
        f"(min {min(values):.3g}, max {max(values):.3g}; {len(values)} runs)"
    )


def ownership_cost(checks: int) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port, pgid = sock.getsockname()[1], os.getpgid(0)
        times_ms = []
        for _ in range(checks):
            t0 = time.perf_counter()
            holder = ports.port_holder("127.0.0.1", port, group_members(pgid))
            times_ms.append((time.perf_counter() - t0) * 1000)
        assert holder == ports.OURS, holder
    processes = sum(1 for p in os.listdir("/proc") if p.isdigit())
    print(summary(f"ownership check, {processes} processes in /proc", times_ms, "ms"))


class _Foreign(BaseHTTPRequestHandler):
    posts = 0

    def do_GET(self) -> None:
        body = json.dumps({"object": "list", "data": [{"id": "tiny", "object": "model"}]})
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def do_POST(self) -> None:
        _Foreign.posts += 1
        self.send_response(500)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def foreign_port(model: Path, logs: Path) -> float:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Foreign)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    proc = EngineProcess.start(
        vllm_argv(model, port), ENV, logs / f"foreign-{port}.log", cpu_affinity=[CORE]
    )
    try:
        proc.wait_ready(f"http://127.0.0.1:{port}", timeout_s=300)
        raise SystemExit("a foreign server's port was taken for the engine")
    except EngineStartFailed as exc:
        failed_s = time.monotonic() - proc.started_at
        assert exc.failure.kind == "port_in_use", exc.failure
    finally:
        proc.stop()
        server.shutdown()
    assert _Foreign.posts == 0
    return failed_s


def kill_9(model: Path, logs: Path) -> tuple[float, int, bool]:
    port = ports.free_port()
    args = json.dumps(
        [
            vllm_argv(model, port),
            ENV,
            str(logs / f"kill-{port}.log"),
            f"http://127.0.0.1:{port}",
            CORE,
        ]
    )
    tuner = subprocess.Popen([sys.executable, "-c", FAKE_TUNER, args], stdout=subprocess.PIPE)
    ident = None
    try:
        ident = json.loads(tuner.stdout.readline())
        members = len(group_members(ident["pgid"]))
        tuner.kill()
        tuner.wait(timeout=10)
        t0 = time.monotonic()
        while group_members(ident["pgid"]) and time.monotonic() - t0 < 30:
            time.sleep(0.02)
        gone_s = time.monotonic() - t0
        return gone_s, members, ports.port_is_free("127.0.0.1", port)
    finally:
        tuner.kill()
        tuner.wait()
        if ident is not None:
            stop_orphan(ident, grace_s=1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--checks", type=int, default=200)
    args = parser.parse_args()
    ownership_cost(args.checks)
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        model = make_tiny_model(tmp / "model")
        foreign, gone = [], []
        for i in range(args.repeats):  # interleaved: one of each per round
            load = os.getloadavg()[0]
            foreign.append(foreign_port(model, tmp))
            gone_s, members, free = kill_9(model, tmp)
            gone.append(gone_s)
            print(
                f"round {i + 1} (load 1m {load:.2f}): port_in_use {foreign[-1]:.1f} s after "
                f"launch; group of {members} gone {gone_s:.2f} s after kill -9, port free: {free}",
                flush=True,
            )
        print(summary("port_in_use after launch, foreign server on the port", foreign))
        print(summary("vLLM group gone after kill -9 of its tuner", gone))


if __name__ == "__main__":
    main()
