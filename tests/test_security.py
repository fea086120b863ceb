"""Security basics that hold across the code base: no shell, no killing by name, argv only."""

from __future__ import annotations

import re
from pathlib import Path

from tuner.config import StudySpec
from tuner.space import engine_argv

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "tuner").rglob("*.py")) + sorted((ROOT / "benchmarks").rglob("*.py"))


def test_no_shell_and_no_kill_by_name() -> None:
    forbidden = re.compile(r"shell\s*=\s*True|os\.system\(|\bpkill\b|\bkillall\b|os\.popen\(")
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in SOURCES
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if forbidden.search(line)
    ]
    assert offenders == []


def test_hostile_values_stay_single_arguments() -> None:
    hostile = '"; rm -rf ~'
    spec = StudySpec.model_validate(
        {
            "name": "s",
            "engine": {"model": "$(reboot)", "flags": {"chat-template": hostile}},
            "search_space": {"parameters": {"max-num-seqs": {"type": "int", "low": 1, "high": 8}}},
            "workload": {},
        }
    )
    argv = engine_argv(spec, {"max-num-seqs": 4}, port=8000)
    assert hostile in argv and "$(reboot)" in argv
    assert argv[argv.index("--host") + 1] == "127.0.0.1"  # loopback unless the file says so
