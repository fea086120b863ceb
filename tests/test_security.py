"""Security basics that hold across the code base: no shell, no killing by name, argv only."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from tuner.errors import UserError
from tuner.results.export import env_assignments, render
from tuner.results.pareto import TrialPoint
from tuner.results.selection import Selection
from tuner.spec.space import engine_argv
from tuner.spec.study import StudySpec

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


HOSTILE_ENV = {
    "A": "$(touch pwned-a)",
    "B": "`touch pwned-b`",
    "C": "x'; touch pwned-c; '",
    "D": "line\ntouch pwned-d",
    "E": "a\u2028b\x85c\x7fd\\e'f\r\tg é",  # YAML's line breaks, DEL, quotes, non-ASCII
}


# A model name is one printable line (checked at load, `spec.inputs.ModelName`), so the
# hostile one carries substitutions and quotes but no line break.
HOSTILE_MODEL = "m $(touch pwned-m) `touch pwned-n` x'; touch pwned-o; '\"y"


def _hostile_spec() -> StudySpec:
    return StudySpec.model_validate(
        {
            "name": "s",
            "engine": {"model": HOSTILE_MODEL, "env": HOSTILE_ENV},
            "hardware": {"gpu": "a6000\ntouch pwned-gpu"},
            "search_space": {"parameters": {"max-num-seqs": {"type": "int", "low": 1, "high": 8}}},
            "workload": {"dataset_name": "jsonl", "dataset_path": "d\ntouch pwned-path"},
        }
    )


def test_env_name_with_command_substitution_is_refused_by_export() -> None:
    """A stored spec that predates the load-time check still cannot export such a name."""
    with pytest.raises(UserError, match="not a POSIX name"):
        env_assignments({"X$(touch pwned)": "1"})
    with pytest.raises(ValidationError, match="not a POSIX name"):
        StudySpec.model_validate(
            {
                "name": "s",
                "engine": {"model": "m", "env": {"X$(touch pwned)": "1"}},
                "search_space": {"parameters": {"a": {"type": "bool"}}},
                "workload": {},
            }
        )


def test_shell_and_yaml_exports_sourced_by_bash_run_nothing(tmp_path: Path) -> None:
    """Both exports go through a real bash: every value arrives intact, no file appears."""
    spec = _hostile_spec()
    point = TrialPoint(
        number=0, state="COMPLETE", params={"max-num-seqs": 4}, metrics={}, status="feasible"
    )
    choice = Selection(point, "trial 0, as asked")
    shell = render("shell", spec, choice, "s", simulated=True)
    yaml_text = render("yaml", spec, choice, "s", simulated=True, config_path="my cfg $(x).yaml")
    (run_line,) = [line for line in yaml_text.splitlines() if line.startswith("# run with: ")]
    # `vllm` is a function that prints its argv and the env it was given.
    show = (
        "vllm() { printf '%s\\n' \"$@\"; "
        "for v in A B C D E; do printf '%s=%s\\n' $v \"${!v}\"; done; }"
    )
    (tmp_path / "export.sh").write_text(shell)
    (tmp_path / "yaml-run.sh").write_text(run_line.removeprefix("# run with: ") + "\n")
    outputs = []
    for script in ("export.sh", "yaml-run.sh"):
        proc = subprocess.run(
            ["bash", "-c", f"{show}; source {script}"],
            capture_output=True,
            check=True,
            cwd=tmp_path,
            env={"PATH": os.environ["PATH"]},
        )
        outputs.append(proc.stdout.decode())  # bytes: keep the \r as it came
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export.sh", "yaml-run.sh"]
    for out in outputs:
        for name, value in HOSTILE_ENV.items():
            assert f"{name}={value}\n" in out
    assert f"\n{HOSTILE_MODEL}\n" in outputs[0]  # the model path, as one argument
    assert "--config\nmy cfg $(x).yaml\n" in outputs[1]
    # Values with line breaks stay inside comments: no line of the export is uncommented
    # except the command itself.
    assert all(line.startswith("#") for line in yaml_text.split("\nmodel:")[0].splitlines())
    assert yaml.safe_load(yaml_text) == {"model": HOSTILE_MODEL, "max-num-seqs": 4}
