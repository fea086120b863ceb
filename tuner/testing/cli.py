"""The `tuner` CLI as a user runs it: one command to completion, or a run in the background."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]  # the checkout (studies/, search_spaces/)


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


def tuner(*args: str, cwd: Path, timeout: float = 300, **kw: Any) -> subprocess.CompletedProcess:
    """Run the `tuner` CLI as a user would, from `cwd`, and capture its output."""
    return subprocess.run(
        [*TUNER, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, **kw
    )
