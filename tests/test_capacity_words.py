"""A capacity capped at `capacity.max_rps` is a lower bound, and every output says so
(issue 24, item 11): best, export, trials and the report."""

from __future__ import annotations

import json
from pathlib import Path

from tuner.testing import sim_study, tuner

AT_LEAST = "at least 2 req/s (the highest rate allowed)"


def test_a_capacity_at_max_rps_reads_at_least_everywhere(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    # the simulated 4×A6000 serves far more than 2 req/s of 128-token prompts within 5 s
    study = sim_study(
        tmp_path,
        tiny_model_dir,
        workload={"num_prompts": 8, "request_rate": 1},
        objective={
            "mode": "capacity",
            "slo": ["p99_ttft_ms<=5000"],
            "capacity": {"start_rps": 1, "max_rps": 2, "max_runs": 3},
        },
    )
    db = ("--storage", "sqlite:///t.db")
    plan = tuner("plan", str(study), "--n-trials", "2", *db, cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr

    best = tuner("best", str(study), "--simulated", *db, cwd=tmp_path)
    assert best.returncode == 0, best.stderr
    assert f"# capacity {AT_LEAST} within the SLOs" in best.stdout
    assert "score +0.000 " in best.stdout  # the baseline's own score: not −0.000

    export = tuner("export", str(study), "--simulated", *db, cwd=tmp_path)
    assert export.returncode == 0, export.stderr
    assert f"capacity = {AT_LEAST}" in export.stdout
    assert "capacity.max_rps: no higher rate was tried" in export.stdout
    assert "run cap" not in export.stdout

    rows = json.loads(
        tuner("trials", str(study), "--simulated", *db, "--format", "json", cwd=tmp_path).stdout
    )
    assert [(r["capacity_rps"], r["capacity_capped"]) for r in rows] == [(2.0, True)] * 2
    table = tuner("trials", str(study), "--simulated", *db, cwd=tmp_path).stdout
    assert "at least 2" in table

    out = tuner("report", str(study), "--simulated", *db, "-o", "r.html", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    page = (tmp_path / "r.html").read_text().replace("\\u002f", "/")
    assert f"trial 0: {AT_LEAST}, 2 runs" in page  # the capacity bars' hover text
    assert "run cap" not in page
