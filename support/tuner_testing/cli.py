"""The `tuner` CLI as a user runs it: one command to completion, or a run in the background."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tuner_testing.forked import REPO, command

__all__ = ["REPO", "TUNER", "start_run", "tuner"]

TUNER = [sys.executable, "-m", "tuner.cli"]


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

    A fork of the `tuner` zygote when it is free (tuner_testing.forked: the same process a fresh
    start gives, without its seconds of imports), else a fresh `python -m tuner.cli`.
    """
    if not kw:
        return command(sys.executable, "tuner", [*TUNER[1:], *args], cwd=cwd, timeout_s=timeout,
                       env=env, input_text=input)  # fmt: skip
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
