"""The engine layer against real vLLM (CPU build): serving, timeout, stop, a dead tuner.

A config vLLM's CPU rule refuses (block size 16) is refused before launch, through the whole
loop: tests/test_vllm_rules.py; the log of a refused start: tests/test_engine_failures.py.

Each test here starts at most one engine (~20–60 s each); the session server is shared. The
tests of the process group start vLLM's shipped process tree (API server, EngineCore, worker;
`SHIPPED_PROCESSES`), where the suite's other engines keep the worker in EngineCore (conftest).
The stop of a ready server (nothing left, the port free) is checked on the engine that
tests/test_shape_vllm.py starts with a study's exported flags: one start for both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import SHIPPED_PROCESSES

from tuner.engine.failures import EngineStartFailed
from tuner.engine.ports import free_port, port_is_free
from tuner.engine.process import EngineProcess, group_members, stop_orphan
from tuner.trial import FailureKind

pytestmark = pytest.mark.vllm
SERVER_CORE = max(os.sched_getaffinity(0))  # as conftest.server_core()


def stream(base_url: str, endpoint: str, body: dict) -> list[dict]:
    """POST with `stream: true` and return the SSE data messages, parsed."""
    payload = {**body, "stream": True, "stream_options": {"include_usage": True}}
    messages = []
    with (
        httpx.Client(timeout=60, trust_env=False) as client,
        client.stream("POST", f"{base_url}{endpoint}", json=payload) as resp,
    ):
        assert resp.status_code == 200, resp.read()
        for line in resp.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                messages.append(json.loads(line[len("data: ") :]))
    return messages


def assert_group_gone(pgid: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)


def assert_shipped_tree(pgid: int) -> None:
    """vLLM's default process tree: its model runs in a worker process beside EngineCore (vLLM
    names both in their command lines), not in EngineCore as the suite's other engines do."""
    titles = [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in group_members(pgid)]
    assert any(t.startswith(b"VLLM::EngineCore") for t in titles), titles
    assert any(t.startswith(b"VLLM::Worker") for t in titles), titles


@pytest.mark.parametrize(
    ("endpoint", "body"),
    [
        ("/v1/completions", {"prompt": "The quick brown fox"}),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16},
        ),
    ],
)
def test_tiny_model_streams_on_both_endpoints(vllm_server, endpoint: str, body: dict) -> None:
    body = {**body, "model": vllm_server.model, "max_tokens": 16, "ignore_eos": True}
    messages = stream(vllm_server.base_url, endpoint, body)
    with_choices = [m for m in messages if m.get("choices")]
    assert len(with_choices) >= 16 - 1  # one chunk per token (chat adds a role-only first chunk)
    assert messages[-1]["usage"]["completion_tokens"] == 16
    assert messages[-1]["choices"] == []


def test_session_server_is_pinned_and_reports_its_version(vllm_server) -> None:
    info = vllm_server.process.ready_info
    assert info is not None
    assert info.version is not None and info.version.startswith("0.32")
    assert info.models == [vllm_server.model]
    members = group_members(vllm_server.process.pgid)
    assert len(members) >= 2, "API server and EngineCore share the engine's process group"
    for pid in members:
        assert os.sched_getaffinity(pid) == {SERVER_CORE}


def test_startup_timeout_kills_the_whole_group_and_frees_the_port(
    vllm_command, tmp_path: Path
) -> None:
    port = free_port()
    argv, env = vllm_command(port)
    env.update(SHIPPED_PROCESSES)
    proc = EngineProcess.start(argv, env, tmp_path / "engine.log", cpu_affinity=[SERVER_CORE])
    # The timeout must hit a multi-process engine: wait (however loaded the box) until vLLM
    # has spawned EngineCore, then time out just after, long before it could be ready.
    deadline = time.monotonic() + 180
    while len(group_members(proc.pgid)) < 2 and proc.poll() is None:
        assert time.monotonic() < deadline, "vLLM never spawned EngineCore"
        time.sleep(0.05)
    sizes: list[int] = []
    with pytest.raises(EngineStartFailed) as err:
        proc.wait_ready(
            f"http://127.0.0.1:{port}",
            timeout_s=time.monotonic() - proc.started_at + 0.5,  # counted from launch
            on_tick=lambda _: sizes.append(len(group_members(proc.pgid))),
        )
    assert err.value.failure.kind == FailureKind.STARTUP_TIMEOUT
    assert max(sizes, default=0) >= 2, "the timeout must have hit a multi-process engine"
    assert_group_gone(proc.pgid)
    assert port_is_free("127.0.0.1", port)


FAKE_TUNER = """
import json, sys, time
from pathlib import Path
from tuner.engine.process import EngineProcess
argv, env, log, url, core = json.loads(sys.argv[1])
engine = EngineProcess.start(argv, env, Path(log), cpu_affinity=[core])
engine.wait_ready(url, 240)
print(json.dumps(engine.identity()), flush=True)
time.sleep(600)
"""


def test_vllm_dies_with_a_kill_9_tuner(vllm_command, tmp_path: Path) -> None:
    """The parent-death SIGTERM reaches vLLM's API server, which stops its whole group."""
    port = free_port()
    argv, env = vllm_command(port)
    env.update(SHIPPED_PROCESSES)
    url = f"http://127.0.0.1:{port}"
    args = json.dumps([argv, env, str(tmp_path / "engine.log"), url, SERVER_CORE])
    tuner = subprocess.Popen([sys.executable, "-c", FAKE_TUNER, args], stdout=subprocess.PIPE)
    ident = None
    try:
        ident = json.loads(tuner.stdout.readline())
        assert len(group_members(ident["pgid"])) >= 2
        assert_shipped_tree(ident["pgid"])
        tuner.kill()
        tuner.wait(timeout=10)
        t0 = time.monotonic()
        while group_members(ident["pgid"]) and time.monotonic() - t0 < 30:
            time.sleep(0.1)
        print(f"engine group gone {time.monotonic() - t0:.1f} s after kill -9 of its tuner")
        assert group_members(ident["pgid"]) == []
        assert port_is_free("127.0.0.1", port)
    finally:
        tuner.kill()
        if ident is not None:
            stop_orphan(ident, grace_s=1.0)
