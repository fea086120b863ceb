"""Capacity mode against real vLLM (the CPU build, tiny dummy model): one trial, one engine
start, several rate steps over HTTP. Heavy (one engine start, 20–60 s, plus the runs)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import yaml
from test_run_sim import _no_engine_left, _trials

from tuner.testing import cpu_study, tuner

pytestmark = pytest.mark.vllm


def test_one_capacity_trial_on_real_vllm(
    tmp_path: Path, tiny_model_dir: Path, vllm_python: Path
) -> None:
    from conftest import server_core

    study = cpu_study(
        tmp_path,
        tiny_model_dir,
        vllm_python,
        server_core(),
        objective={
            "mode": "capacity",
            "slo": ["p99_ttft_ms<=2000"],
            "capacity": {"start_rps": 4, "max_runs": 3, "resolution": 0.25},
        },
    )
    data = yaml.safe_load(study.read_text())
    del data["workload"]["max_concurrency"]  # a capacity is a rate served, not a capped one
    study.write_text(yaml.safe_dump(data, sort_keys=False))
    run = tuner("run", str(study), "--n-trials", "1", cwd=tmp_path, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    (base,) = _trials(tmp_path, "cpu-tiny")
    a = base.user_attrs
    assert a["simulated"] is False and a["vllm_version"].startswith("0.")
    steps = a["rate_steps"]
    assert 1 <= len(steps) <= 3 and steps[0]["rate_rps"] == 4
    for s in steps:
        assert s["pruned_reason"] or s["completed"] == 16
    feasible = [s["rate_rps"] for s in steps if s["feasible"]]
    assert a["capacity_rps"] == (max(feasible) if feasible else 0.0)
    with sqlite3.connect(tmp_path / "tuner.db") as db:
        assert db.execute("SELECT COUNT(*) FROM tuner_engines").fetchone()[0] == 1
    assert _no_engine_left(tmp_path)
    export = tuner("export", str(study), cwd=tmp_path)
    if feasible:
        assert export.returncode == 0 and "capacity = " in export.stdout
