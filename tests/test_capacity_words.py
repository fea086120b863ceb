"""Capacity mode has the capacity as its headline, and a capacity capped at
`capacity.max_rps` is a lower bound that every output states as one (issue 24, item 11;
issue 21, §3): the live line of the run, best, export (every format), trials and the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner_testing import sim_study, tuner

pytestmark = pytest.mark.slow  # whole studies: `make test`, not `make test-fast`

AT_LEAST = "≥ 2 req/s (the highest rate allowed)"
GOODPUT = "(requests per second served within the latency limits)"


def test_a_capacity_at_max_rps_reads_at_least_everywhere(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    # the simulated 4×A6000 serves far more than 2 req/s of 128-token prompts within 5 s
    study = sim_study(
        tmp_path,
        tiny_model_dir,
        workload={"num_prompts": 8, "request_rate": 1},  # 8 / (4 × 1 s) shows 2 req/s
        objective={
            "mode": "capacity",
            "slo": ["p99_ttft_ms<=1000"],
            "capacity": {"start_rps": 1, "max_rps": 2, "max_runs": 3},
        },
    )
    db = ("--storage", "sqlite:///t.db")
    plan = tuner("plan", str(study), "--n-trials", "2", *db, cwd=tmp_path, env=_wide())
    assert plan.returncode == 0, plan.stderr
    # the live line leads with the capacity, then the figures of the run at that rate
    assert f"trial 1: capacity {AT_LEAST}  at that rate: p99 TTFT " in plan.stderr

    best = tuner("best", str(study), "--simulated", *db, cwd=tmp_path)
    assert best.returncode == 0, best.stderr
    lines = best.stdout.splitlines()
    assert lines[1].startswith(f"# capacity {AT_LEAST} within the SLOs; score +0.000 ")
    assert lines[2].startswith("# at that rate: p99 TTFT ")
    assert "this is the baseline itself, no change" in best.stdout

    export = tuner("export", str(study), "--simulated", "--trial", "1", *db, cwd=tmp_path)
    assert export.returncode == 0, export.stderr
    assert f"capacity = {AT_LEAST}" in export.stdout
    assert "no higher rate was tried (capacity.max_rps" in export.stdout
    assert "run cap" not in export.stdout
    assert f"goodput 2 req/s {GOODPUT}" in export.stdout or f"req/s {GOODPUT}" in export.stdout
    # the change against the defaults: both at the cap, so no percent is claimed
    change = "# against vLLM's defaults (baseline trial 0): capacity ≥ 2 → ≥ 2 req/s (both at "
    assert change in export.stdout
    doc = json.loads(
        tuner("export", str(study), "--simulated", "--format", "json", *db, cwd=tmp_path).stdout
    )
    assert doc["capacity"]["lower_bound"] is True and doc["capacity"]["text"] == AT_LEAST
    assert doc["capacity"]["goodput_means"] == GOODPUT.strip("()")

    rows = json.loads(
        tuner("trials", str(study), "--simulated", *db, "--format", "json", cwd=tmp_path).stdout
    )
    assert [(r["capacity_rps"], r["capacity_capped"]) for r in rows] == [(2.0, True)] * 2
    # the latency–load points: one object per rate run, with its figures
    # trial 1 is raced at the best capacity so far (early stopping's "cannot beat the best",
    # docs/early-stopping.md), held there, and searched from its own start as trial 0 was: the
    # race's run at the cap is the one its own search re-uses (issue 50 item 1)
    for row, rates in zip(rows, ([1.0, 2.0], [1.0, 2.0]), strict=True):
        steps = row["rate_steps"]
        assert [s["rate_rps"] for s in steps] == rates
        assert all(s["feasible"] and s["p99_ttft_ms"] > 0 for s in steps)
    table = tuner("trials", str(study), "--simulated", *db, cwd=tmp_path).stdout
    assert "≥ 2 req/s" in table

    out = tuner("report", str(study), "--simulated", *db, "-o", "r.html", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    page = (tmp_path / "r.html").read_text().replace("\\u002f", "/").replace("\\u2265", "≥")
    # the capacity bars' hover text: the ceiling confirmed on a second seed (a repeat)
    assert f"trial 0: {AT_LEAST}, 2 rates, 3 runs" in page
    assert "<th>capacity</th>" in page and f"<td>{AT_LEAST}</td>" in page  # the deploy table
    assert "run cap" not in page


def _wide() -> dict[str, str]:
    """A wide terminal for the live lines (rich wraps at the terminal's width)."""
    import os

    return {**os.environ, "COLUMNS": "250"}
