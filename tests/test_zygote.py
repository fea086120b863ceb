"""`tuner_testing.tuner` forks the zygote (tuner_testing.zygote): the same exit code, output
and files as a fresh `python -m tuner.cli`, and a timeout that kills the command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tuner.engine.ports import free_port
from tuner_testing import TUNER, sim_study, tuner
from tuner_testing.forked import _Zygote, run


def _fresh(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*TUNER, *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env
    )


@pytest.mark.parametrize(
    "args",
    [
        ("trialsx",),  # a usage error: one line, exit 2
        ("run", "missing.yaml"),  # a user error
        ("sim", "--help"),  # exit 0, stdout only
    ],
)
def test_a_forked_command_answers_as_a_fresh_one(tmp_path: Path, args: tuple[str, ...]) -> None:
    forked, fresh = tuner(*args, cwd=tmp_path), _fresh(*args, cwd=tmp_path)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode,
        fresh.stdout,
        fresh.stderr,
    )
    assert not list(tmp_path.iterdir())


def test_the_command_gets_its_own_cwd_and_env(tmp_path: Path, tiny_model_dir: Path) -> None:
    sim_study(tmp_path, tiny_model_dir)
    env = {**os.environ, "TUNER_STORAGE": f"sqlite:///{tmp_path}/elsewhere.db"}
    forked = tuner("trials", "study.yaml", cwd=tmp_path, env=env)
    assert forked.returncode == 2
    message = f"no database at {tmp_path}/elsewhere.db: run the study first, or pass --storage"
    assert forked.stderr == f"tuner: error: {message}\n"
    assert forked.stderr == _fresh("trials", "study.yaml", cwd=tmp_path, env=env).stderr


def test_a_timeout_kills_the_command_and_raises(tmp_path: Path) -> None:
    port = free_port()
    args = (
        "sim",
        "serve",
        "--model",
        "deepseek-r1-distill-qwen-32b",
        "--tensor-parallel-size",
        "4",
    )
    args += ("--port", str(port))
    with pytest.raises(subprocess.TimeoutExpired) as err:
        tuner(*args, cwd=tmp_path, timeout=3)
    assert "Application startup complete" in (err.value.stderr or "") + (err.value.output or "")
    assert tuner("sim", "--help", cwd=tmp_path).returncode == 0  # the zygote serves on


def test_two_answers_that_arrive_in_one_read_are_both_seen() -> None:
    """A command that ends at once: its pid and its exit code reach the pipe together, and
    the second must not wait in a buffer where `select` cannot see it."""
    read_fd, write_fd = os.pipe()
    zygote = object.__new__(_Zygote)
    zygote._buffer = b""
    zygote.process = SimpleNamespace(stdout=os.fdopen(read_fd, "rb", buffering=0))
    os.write(write_fd, b'{"pid": 7}\n{"returncode": 2}\n')
    assert zygote.answer(None) == {"pid": 7}
    assert zygote.answer(0.1) == {"returncode": 2}
    assert zygote.answer(0.1) is None  # nothing more: the timeout, not a hang
    os.close(write_fd)


_SHOW = "import os, sys; print(sys.argv, __name__, sorted(os.sched_getaffinity(0))); sys.exit(3)"


@pytest.mark.parametrize("form", ["-c", "script"])
def test_code_and_scripts_run_as_the_interpreter_runs_them(tmp_path: Path, form: str) -> None:
    """`python -c CODE ARGS` and `python SCRIPT ARGS`, as `vllm_run` forks them from the
    vLLM zygote: the same argv, `__main__`, exit code and output as a fresh interpreter."""
    script = tmp_path / "show.py"
    script.write_text(_SHOW + "\n")
    argv = ["-c", _SHOW, "a", "b"] if form == "-c" else [str(script), "a", "b"]
    forked = run(sys.executable, "tuner", argv, cwd=tmp_path, timeout_s=60)
    fresh = subprocess.run(
        [sys.executable, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert forked is not None
    assert (forked.returncode, forked.stdout, forked.stderr) == (3, fresh.stdout, fresh.stderr)


def test_a_forked_command_runs_on_the_cpus_asked_for(tmp_path: Path) -> None:
    """`cpus`: as `taskset -c` pins a fresh command (the client of test_bench_vs_vllm)."""
    core = min(os.sched_getaffinity(0))
    forked = run(sys.executable, "tuner", ["-c", _SHOW], cwd=tmp_path, timeout_s=60, cpus=[core])
    assert forked is not None and forked.stdout.endswith(f"[{core}]\n")


_WARN = "import warnings; warnings.warn('as the interpreter filters it'); print('done')"


@pytest.mark.parametrize("setting", [None, "ignore"])
def test_a_forked_command_filters_warnings_by_its_own_pythonwarnings(
    tmp_path: Path, setting: str | None
) -> None:
    """The command's PYTHONWARNINGS, not the zygote's (tests/test_results_cli.py sets it):
    the same output and exit code as a fresh interpreter started with that environment."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    if setting is not None:
        env["PYTHONWARNINGS"] = setting
    argv = ["-c", _WARN]
    forked = run(sys.executable, "tuner", argv, cwd=tmp_path, timeout_s=60, env=env)
    fresh = subprocess.run(
        [sys.executable, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env
    )
    assert forked is not None
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode,
        fresh.stdout,
        fresh.stderr,
    )
