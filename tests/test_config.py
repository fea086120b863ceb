"""Study files: valid ones load; each mistake is one line naming the file and the field."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tuner.errors import UserError
from tuner.spec.parsing import parse_duration_s
from tuner.spec.study import load_study_spec

ROOT = Path(__file__).resolve().parents[1]


def _study(tmp_path: Path, **overrides) -> Path:
    data = {
        "name": "t",
        "engine": {"model": "m"},
        "search_space": {"parameters": {"max-num-seqs": {"type": "int", "low": 8, "high": 64}}},
        "workload": {"num_prompts": 4},
    }
    for key, value in overrides.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "studies").glob("*.yaml")))
def test_shipped_studies_load(name: str) -> None:
    spec = load_study_spec(ROOT / "studies" / name)
    assert spec.search_space.parameters


def test_search_space_file_is_resolved_relative_to_the_study(tmp_path: Path) -> None:
    (tmp_path / "spaces").mkdir()
    (tmp_path / "spaces" / "s.yaml").write_text(
        "parameters:\n  block-size: {type: categorical, choices: [16, 32]}\n"
    )
    spec = load_study_spec(_study(tmp_path, search_space="spaces/s.yaml"))
    assert list(spec.search_space.parameters) == ["block-size"]


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"bogus": 1}, "bogus: unknown key"),
        (
            {"search_space": {"parameters": {"x": {"type": "int", "low": 9, "high": 1}}}},
            "low (9) > high (1)",
        ),
        (
            {"search_space": {"parameters": {"x": {"type": "complex", "low": 1, "high": 2}}}},
            "search_space.parameters.x.type",
        ),
        ({"search_space": "nowhere.yaml"}, "search-space file not found"),
        ({"engine": None}, "engine: Field required"),
        ({"objective": {"weights": {"p99_bogus_ms": 1}}}, "unknown metric"),
        ({"objective": {"slo": ["p99_ttft_ms=<3"]}}, "malformed SLO"),
        ({"budget": {"timeout": "soon"}}, "bad duration"),
        ({"workload": {"request_rate": 0}}, "request_rate must be > 0"),
        ({"search": {"fidelity": "triple"}}, "search.fidelity: Input should be 'single' or"),
        ({"search": {"candidates": 0}}, "search.candidates"),
    ],
)
def test_bad_study_files_name_file_and_field(tmp_path: Path, overrides, needle: str) -> None:
    path = _study(tmp_path, **overrides)
    with pytest.raises(UserError) as err:
        load_study_spec(path)
    message = str(err.value)
    assert needle in message
    assert "\n" not in message
    assert "study.yaml" in message or "nowhere.yaml" in message


def test_missing_study_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="study file not found"):
        load_study_spec(tmp_path / "absent.yaml")


def test_cli_reports_bad_study_in_one_line_with_exit_2(tmp_path: Path) -> None:
    path = _study(tmp_path, bogus=1)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner.cli",
            "run",
            str(path),
            "--storage",
            f"sqlite:///{tmp_path}/t.db",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "bogus: unknown key" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "t.db").exists(), "a bad study file must not create a database"


def test_durations() -> None:
    assert parse_duration_s("8h") == 8 * 3600
    assert parse_duration_s("90m") == 5400
    assert parse_duration_s("15") == 15
    with pytest.raises(ValueError):
        parse_duration_s("8 hours")
