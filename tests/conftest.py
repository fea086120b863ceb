"""Shared fixtures: the tiny model, the vLLM CPU environment, and one real vLLM per session.

A real vLLM start costs ~20–40 s on these 2-core machines, so `vllm_server` starts one for the
whole session. Tests that need their own engine (other flags) build it with `vllm_command`.
Any test that uses the vLLM fixtures is marked `vllm` automatically (`make test-fast` skips
them with `-m "not vllm"`).

A test of the tuner's logic runs `tuner` in its own process on the simulation core
(`tuner_testing.inprocess`: no server, no waiting); `tuner sim serve` is for tests whose point
is a process (signals, ports, kill -9, PostgreSQL workers, the engine's own words). Even
those check the tuner, not the simulator's timing, so `tuner sim serve` serves
SIM_TIME_SCALE times faster than real time in them (`--time-scale`, docs/simulator.md): the
same events in less wall time, measured in simulated seconds. A test marked `realtime` (it
checks wall-clock timing, or runs a client that does not follow the scale) gets real time;
`TUNER_SIM_TIME_SCALE=1 make test` runs every test in real time.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tuner.engine.ports import free_port
from tuner.engine.process import EngineProcess
from tuner.engine.sockets import RPC_BASE_ENV
from tuner.tools.tinymodel import make_tiny_model

REPO = Path(__file__).resolve().parent.parent
VLLM_VENV = REPO / ".venv-vllm"
SERVED_MODEL = "tiny"
VLLM_STARTUP_TIMEOUT_S = 300.0

# Brief §5: the configuration that serves the tiny model on the CPU build.
VLLM_CPU_FLAGS = [
    "--load-format", "dummy",
    "--dtype", "bfloat16",
    "--max-model-len", "1024",
    "--max-num-batched-tokens", "1024",
    "--max-num-seqs", "8",
    "--block-size", "32",
    "--enforce-eager",
]  # fmt: skip

_VLLM_FIXTURES = {"vllm_python", "vllm_server", "vllm_command"}
# vLLM's switch between its multi-process executor (a worker process beside EngineCore, the
# default) and the in-process one; on its CPU platform 0 keeps the worker in EngineCore
# (vllm/platforms/cpu.py, `check_and_update_config`).
VLLM_MULTIPROCESSING_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"
SHIPPED_PROCESSES = {VLLM_MULTIPROCESSING_ENV: "1"}  # vLLM's default: what users run
SIM_TIME_SCALE = "4"  # higher: the box's lag, N times larger, shows in the figures (simulator.md)


def on_ci() -> bool:
    """CI=true (set by .ci/run and by CI systems): every test must run, none may skip."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _skip_fails_on_ci(report: pytest.TestReport | pytest.CollectReport) -> None:
    """On CI a skip is a failure: a test that did not run proved nothing (`pytest.skip`,
    `skipif`, `importorskip`, in a test or a whole module); its reason is the message."""
    if on_ci() and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped on CI (CI=true), which is a failure: {reason}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport:
    report = yield
    _skip_fails_on_ci(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> pytest.CollectReport:
    report = yield
    _skip_fails_on_ci(report)
    return report


# Where the box has a memory file system (/dev/shm), the tests' temporary files live there:
# a SQLite commit took 18 ms on this box's disk (its fsyncs) and 0.04 ms there, and the suite
# commits tens of thousands of times (docs/performance.md, "The suite's time").
MEMORY_FS = Path("/dev/shm")


def _memory_temp_root() -> str | None:
    """/dev/shm where it is a writable tmpfs and TMPDIR names no folder of the user's own."""
    if os.environ.get("TMPDIR"):
        return None
    try:
        with open("/proc/mounts") as mounts:
            tmpfs = any(line.split()[1:3] == [str(MEMORY_FS), "tmpfs"] for line in mounts)
    except OSError:
        return None
    return str(MEMORY_FS) if tmpfs and os.access(MEMORY_FS, os.W_OK | os.X_OK) else None


def pytest_configure(config: pytest.Config) -> None:
    # pytest's numbered folders (`pytest-of-USER/pytest-N`, the last three kept; under xdist the
    # main process makes them and each worker gets its own below) and the tests' own
    # `tempfile` folders: on the memory file system. `--basetemp` still wins.
    root = _memory_temp_root()
    if root is not None:
        tempfile.tempdir = root
    # pytest keeps each test module's assertion-rewritten code in tests/__pycache__, unless
    # the interpreter may not write bytecode (PYTHONDONTWRITEBYTECODE, set on these machines):
    # then every worker rewrote all ~130 test modules again, ~3.4 s of CPU per process and run
    # (docs/performance.md, "The suite's time"). Only this process: its children keep the
    # environment's setting.
    sys.dont_write_bytecode = False
    # in the environment, so that every `tuner sim serve` the tests start inherits it
    os.environ.setdefault("TUNER_SIM_TIME_SCALE", SIM_TIME_SCALE)
    # Every real vLLM of the session shares one cache (the user's root wins over the tuner's
    # per-study one): only the first start pays vLLM's model-inspection subprocess (~10 s of
    # CPU here). The test of the per-study cache unsets it (test_run_vllm.py).
    os.environ.setdefault("VLLM_CACHE_ROOT", str(REPO / ".cache" / "vllm-tests"))
    # Every real vLLM of the session runs its model in the EngineCore process, not in a worker
    # process of its own: one spawned interpreter (~9 s of CPU: vLLM's and torch's imports)
    # fewer per start. Still vLLM's API server, EngineCore and CPU worker, on its executor for
    # one process (docs/performance.md, "The suite's time"). The tests of the engine's process
    # group (tests/test_engine_vllm.py) start the shipped tree: `SHIPPED_PROCESSES`.
    os.environ.setdefault(VLLM_MULTIPROCESSING_ENV, "0")
    # The CLI fits its tables and `best`'s comments to $COLUMNS (docs/results.md): the tests
    # read the output of a pipe (80 columns, `best` unwrapped) unless one sets COLUMNS itself.
    # pytest imports readline (`_pytest/capture.py`), and GNU readline puts COLUMNS and LINES
    # in the C environment, not in `os.environ`, so the children would inherit them: unset both.
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)
        os.unsetenv(name)


@pytest.fixture(autouse=True)
def _real_time_when_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    if request.node.get_closest_marker("realtime") is not None:
        monkeypatch.setenv("TUNER_SIM_TIME_SCALE", "1")


def pytest_itemcollected(item: pytest.Item) -> None:
    # Under `pytest -n 3 --dist loadgroup` (`make test`) a session fixture starts once per
    # worker: the tests of one real vLLM, or of one PostgreSQL, all run on one worker. Marked
    # as each test is collected, before pytest-xdist reads the groups.
    fixtures = set(getattr(item, "fixturenames", ()))
    if _VLLM_FIXTURES & fixtures:
        item.add_marker(pytest.mark.vllm)
    if "postgres" in fixtures:
        item.add_marker(pytest.mark.postgres)
    if item.get_closest_marker("postgres") is not None:
        item.add_marker(pytest.mark.xdist_group("postgres"))
    # The real-vLLM groups are the suite's longest path: only tests that start a vLLM server
    # belong to them; ones that only run vLLM's programs do not. Two groups, side by side on
    # two workers: the session server's and its own (pinned to `server_core()`), and the
    # studies that start engines of their own (pinned to `study_core()`, the other core).
    if item.get_closest_marker("vllm") and not item.get_closest_marker("vllm_env"):
        module = getattr(item, "module", None)
        study = getattr(module, "__name__", "") in STUDY_ENGINE_MODULES
        item.add_marker(pytest.mark.xdist_group("vllm-studies" if study else "vllm"))
    # The tests that only run vLLM's programs share one worker, and so one vLLM zygote
    # (`tuner_testing.vllm_run`): vLLM's ~10 s of imports once, not once per worker.
    elif item.get_closest_marker("vllm_env"):
        item.add_marker(pytest.mark.xdist_group("vllm-env"))


# The modules whose tests run `tuner run` on engines of their own (`study_core()`).
# (`test_shape_vllm`'s one start is the engine layer's ready server: the session's group.)
STUDY_ENGINE_MODULES = frozenset({"test_run_vllm", "test_load_runs_vllm", "test_pruning_vllm"})


def server_core() -> int:
    """The core the session's engine is pinned to (1 on the 2-core machines)."""
    return max(os.sched_getaffinity(0))


def study_core() -> int:
    """The core the studies' own engines are pinned to (0 on the 2-core machines): away from
    the session's engine, so that the two real-vLLM groups do not queue on one core."""
    return min(os.sched_getaffinity(0))


@dataclass(frozen=True)
class VllmServer:
    """A running vLLM: where to reach it and the process (for its log and pid)."""

    base_url: str
    model: str  # the served model name to send in requests
    port: int
    model_dir: Path  # also the tokenizer directory
    process: EngineProcess


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Qwen2 model (config + trained tokenizer), built fresh for the session."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny-qwen2"))


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """The Python of the vLLM CPU environment. Missing is a failure, never a skip."""
    python = VLLM_VENV / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} is missing: run `make vllm-env` (the real-vLLM tests need it)")
    site = next(VLLM_VENV.glob("lib/python3*/site-packages"), None)
    if site is None or not (site / "_tuner_amx_permission.pth").exists():
        pytest.fail(f"{VLLM_VENV} lacks the tuner's fixes: run `make vllm-env`")
    return python


@pytest.fixture(scope="session")
def vllm_command(
    vllm_python: Path, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., tuple[list[str], dict[str, str]]]:
    """Build (argv, env) for a vLLM on `port`: brief §5 flags, then `extra` flags (last wins).
    Its IPC sockets go to the session's temp folder, not /tmp (`tuner.engine.sockets`)."""
    ipc = tmp_path_factory.mktemp("ipc")

    def build(port: int, *extra: str, kv_cache_gib: int = 1) -> tuple[list[str], dict[str, str]]:
        argv = [
            str(vllm_python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(tiny_model_dir),
            "--served-model-name", SERVED_MODEL,
            "--host", "127.0.0.1", "--port", str(port),
            *VLLM_CPU_FLAGS, *extra,
        ]  # fmt: skip
        env = {
            "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
            "VLLM_CPU_OMP_THREADS_BIND": str(server_core()),
            "HF_HUB_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            RPC_BASE_ENV: str(ipc),
        }
        return argv, env

    return build


@pytest.fixture(scope="session")
def vllm_server(
    vllm_command: Callable[..., tuple[list[str], dict[str, str]]],
    tiny_model_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[VllmServer]:
    """One real vLLM (brief §5 config) pinned to `server_core()`, ready, for the whole session."""
    port = free_port()
    argv, env = vllm_command(port)
    env["VLLM_SERVER_DEV_MODE"] = "1"  # its prefix cache reset between runs, as the tuner's
    # The session's measuring server runs vLLM's shipped process tree: with the worker in
    # EngineCore its steps outran the API server under load and a chat stream coalesced tokens
    # (test_chat_endpoint_on_real_vllm, once in four fresh-clone runs); ~9 s of CPU, once.
    env.update(SHIPPED_PROCESSES)
    log_path = tmp_path_factory.mktemp("vllm-server") / "engine.log"
    process = EngineProcess.start(argv, env, log_path, cpu_affinity=[server_core()])
    base_url = f"http://127.0.0.1:{port}"
    try:
        process.wait_ready(base_url, VLLM_STARTUP_TIMEOUT_S)
        yield VllmServer(base_url, SERVED_MODEL, port, tiny_model_dir, process)
    finally:
        process.stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator[object]:
    """A real PostgreSQL server for the session (`tuner_testing.PostgresServer`); each test
    takes its own database with `postgres.new_database()`. Missing is a failure, never a skip:
    `make postgres` (which `make test` runs first) finds or installs one."""
    from tuner_testing import PostgresServer, postgres_missing

    why = postgres_missing()
    if why is not None:
        pytest.fail(f"PostgreSQL cannot be started here: {why}")
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()
