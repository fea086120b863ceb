"""Capacity mode against real vLLM (the CPU build, tiny dummy model): one trial, one engine
start, several rate steps over HTTP. Heavy (one engine start, 20–60 s, plus the runs)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import yaml
from test_run_sim import _no_engine_left, _trials

from tuner_testing import cpu_study, tuner

pytestmark = pytest.mark.vllm


def test_one_capacity_trial_on_real_vllm(
    tmp_path: Path, tiny_model_dir: Path, vllm_python: Path
) -> None:
    """A capacity search over a two-scenario mix: every run on the engine start measured cold
    (issue 33), the hit rates stored per run. A `--confirm` re-run is the same trial on an
    engine start of its own, measured through the same path as any trial (warm-ups outside
    the measured set, the cache reset): left out here, one real start fewer for the suite's
    15 minutes."""
    from conftest import study_core

    study = cpu_study(
        tmp_path,
        tiny_model_dir,
        vllm_python,
        study_core(),
        objective={
            "mode": "capacity",
            # 16 prompts show up to 16 / (4 × 1 s) = 4 req/s (`capacity.shown_rps`)
            "slo": ["p99_ttft_ms<=1000"],
            "capacity": {"start_rps": 4, "max_runs": 2, "resolution": 0.25, "max_repeats": 0},
        },
    )
    data = yaml.safe_load(study.read_text())
    w = data["workload"]
    del w["max_concurrency"]  # a capacity is a rate served, not a capped one
    data["workload"] = [  # a scenario mix: two workloads on each engine start
        {**w, "name": "short", "weight": 1, "random_input_len": 64},
        {**w, "name": "long", "weight": 1, "random_input_len": 256},
    ]
    study.write_text(yaml.safe_dump(data, sort_keys=False))
    run = tuner("run", str(study), "--n-trials", "1", cwd=tmp_path, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    (base,) = _trials(tmp_path, "cpu-tiny")
    for t in (base,):
        a = t.user_attrs
        assert a["simulated"] is False and a["vllm_version"].startswith("0.")
        steps = a["rate_steps"]
        assert {s["scenario"] for s in steps} == {"short", "long"} and len(steps) <= 4
        assert all(s["rate_rps"] == 4 for s in steps[:1])
        for s in steps:
            assert s["pruned_reason"] or s["completed"] == 16
        for name in ("short", "long"):
            feasible = [s["rate_rps"] for s in steps if s["scenario"] == name and s["feasible"]]
            found = a["scenarios"][name]["capacity"]["capacity_rps"]
            assert found == (max(feasible) if feasible else 0.0)
        # Every run cold: the engine's own counters over each run's measured requests, random
        # prompts: under 5 % (before, every run after the first re-sent cached prompts)
        runs = a["prefix_cache_runs"]
        assert [r["scenario"] for r in runs] == [s["scenario"] for s in steps]
        assert all(r["reset"] and r["implied_rate"] < 0.05 for r in runs), runs
        assert all(r["hit_rate"] < 0.05 for r in runs if r["hit_rate"] is not None), runs
        assert any(r["hit_rate"] is not None for r in runs), runs
    with sqlite3.connect(tmp_path / "tuner.db") as db:  # one engine start per trial
        assert db.execute("SELECT COUNT(*) FROM tuner_engines").fetchone()[0] == 1
    assert _no_engine_left(tmp_path)
    listed = tuner("trials", str(study), "--format", "json", cwd=tmp_path)
    assert listed.returncode == 0 and "warm prefix cache" not in listed.stdout
