"""Several runs on one engine start, end to end on the simulated engine: a capacity study and
a two-scenario study, through `tuner plan` (virtual time) and `tuner run` (real processes)."""

from __future__ import annotations

import json
import os
import re
import sqlite3
from pathlib import Path

import optuna
import pytest
import yaml

from tuner_testing import sim_study, tuner

pytestmark = pytest.mark.slow  # whole studies: `make test`, not `make test-fast`

CAPACITY = {
    "mode": "capacity",
    "slo": ["p99_ttft_ms<=1500", "mean_tpot_ms<=60"],
    "capacity": {"resolution": 0.1, "max_runs": 5},
}
SCENARIOS = [
    {"name": "chat", "weight": 3, "dataset_name": "random", "random_input_len": 256},
    {
        "name": "doc",
        "weight": 1,
        "dataset_name": "random",
        "random_input_len": 2048,
        "random_range_ratio": 0.5,
        "slo": ["p99_ttft_ms<=20000"],
    },
]


def _study(tmp_path: Path, tok: Path, **kw) -> Path:
    return sim_study(tmp_path, tok, workload=kw.pop("workload", {"num_prompts": 24}), **kw)


def _trials(tmp_path: Path, name: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path}/tuner.db").trials


def test_capacity_study_in_plan_stores_every_step_and_draws_the_curves(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    # 48 prompts show up to 48 / (4 × 0.3 s) = 40 req/s (`capacity.shown_rps`): above the knee
    objective = {**CAPACITY, "slo": ["p99_ttft_ms<=300", "mean_tpot_ms<=60"]}
    study = _study(tmp_path, tiny_model_dir, objective=objective, workload={"num_prompts": 48})
    plan = tuner("plan", str(study), "--n-trials", "4", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    trials = _trials(tmp_path, "e2e-simulated")
    measured = [t for t in trials if "capacity_rps" in t.user_attrs]
    assert len(measured) >= 2
    for t in measured:
        a = t.user_attrs
        steps = a["rate_steps"]
        # the rates (at most max_runs, the race's run at the incumbent's, and the interval's
        # runs: a repeat of one, or a new rate past them, at most max_repeats)
        assert 1 <= len(steps) <= 5 + 1 + 4 and a["capacity"]["runs"] == sum(
            s["runs"] for s in steps
        )
        assert a["capacity"]["capacity_rps_low"] <= a["capacity_rps"]
        feasible = [s["rate_rps"] for s in steps if s["feasible"]]
        # a feasible rate (none: 0; the interval's repeats may pool a rate into meeting them)
        assert a["capacity_rps"] in feasible or a["capacity_rps"] == 0.0
        assert t.values == [a["capacity_rps"]]  # Optuna maximises the capacity
        assert all("p99_ttft_ms" in s or s["pruned_reason"] for s in steps)
        # one engine start per trial: its modelled start-up counts once
        assert a["engine_s"] == pytest.approx(a["startup_s"] + a["workload_s"])
    rows = json.loads(
        tuner("trials", str(study), "--simulated", "--format", "json", cwd=tmp_path).stdout
    )
    assert all("capacity_rps" in r and "capacity_rps_low" in r for r in rows)
    # every config may tie at this knee (then the best is the defaults), and a later one may
    # lose the race against it (docs/objective.md, "The race"): export the defaults by number
    export = tuner("export", str(study), "--simulated", "--trial", "0", cwd=tmp_path)
    assert export.returncode == 0, export.stderr
    assert "capacity = " in export.stdout and "measured at an offered rate of" in export.stdout
    report = tuner("report", str(study), "--simulated", "--output", "r.html", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    html = (tmp_path / "r.html").read_text()
    assert "Latency against load" in html and "Capacity within the SLOs, per trial" in html
    # the curves' SLO: a line near the runs (plotly escapes "<"), else a legend entry saying
    # which edge it lies past (`layout.slo_axis`, as the trade-off plot's)
    line, note = "SLO p99_ttft_ms\\u003c=300", "SLO p99_ttft_ms&lt;=300 \\u2191 off the plot"
    assert line in html or note in html


def test_capacity_trial_in_run_shares_one_engine_start(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    # one repeat: a fresh seed's run through the real path, at little wall time
    capacity = {"resolution": 0.25, "max_runs": 3, "start_rps": 4, "max_repeats": 1}
    objective = {**CAPACITY, "capacity": capacity}
    study = _study(tmp_path, tiny_model_dir, objective=objective, budget={"n_trials": 1})
    run = tuner("run", str(study), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    (base,) = _trials(tmp_path, "e2e")
    steps = base.user_attrs["rate_steps"]
    assert 1 <= len(steps) <= 3 and steps[0]["rate_rps"] == 4
    assert all(s["completed"] > 0 for s in steps if not s["pruned_reason"])
    with sqlite3.connect(tmp_path / "tuner.db") as db:
        launches = db.execute("SELECT COUNT(*) FROM tuner_engines").fetchone()[0]
    assert launches == 1  # every rate step against the one engine start
    # Every step measured cold: the same prompts at each rate, the engine's prefix cache
    # emptied before each (and the warm-ups' prompts outside the measured set). Before, every
    # step after the first found its prompts cached.
    runs = base.user_attrs["prefix_cache_runs"]
    assert [r["rate_rps"] for r in runs] == [s["rate_rps"] for s in steps for _ in range(s["runs"])]
    assert all(r["reset"] and r["hit_rate"] < 0.05 and r["implied_rate"] < 0.05 for r in runs)
    listed = tuner("trials", str(study), "--format", "json", cwd=tmp_path)
    assert "warm prefix cache" not in listed.stdout


def test_a_run_measured_warm_is_flagged_in_trials_best_and_the_report(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """An engine that cannot reset its cache (not in vLLM's dev mode): the rate steps after
    the first send prompts it has cached, and the stored hit rates say so where people look."""
    # no repeats: a repeat's fresh prompts are not in the cache
    capacity = {"resolution": 0.25, "max_runs": 2, "start_rps": 2, "max_repeats": 0}
    objective = {**CAPACITY, "capacity": capacity}
    study = _study(tmp_path, tiny_model_dir, objective=objective, budget={"n_trials": 1})
    data = yaml.safe_load(study.read_text())
    data["engine"]["env"] = {"VLLM_SERVER_DEV_MODE": "0"}
    study.write_text(yaml.safe_dump(data, sort_keys=False))
    run = tuner("run", str(study), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    (base,) = _trials(tmp_path, "e2e")
    first, *later = base.user_attrs["prefix_cache_runs"]
    assert not first["reset"] and first["hit_rate"] < 0.05
    assert later and all(r["hit_rate"] > 0.5 for r in later)
    rows = json.loads(tuner("trials", str(study), "--format", "json", cwd=tmp_path).stdout)
    assert "warm prefix cache" in rows[0]["failure"]
    best = tuner("best", str(study), cwd=tmp_path)
    assert "measured with a warm prefix cache" in best.stdout, best.stdout
    report = tuner("report", str(study), "--output", "r.html", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert "measured with a warm prefix cache" in (tmp_path / "r.html").read_text()


def test_two_scenario_study_stores_each_scenario_and_has_a_front_per_scenario(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    study = _study(
        tmp_path,
        tiny_model_dir,
        workload=[
            {**s, "tokenizer": str(tiny_model_dir), "num_prompts": 16, "request_rate": 4}
            for s in SCENARIOS
        ],
        objective={"aggregate": "worst", "slo": ["p99_ttft_ms<=30000"]},
    )
    wide = {**os.environ, "COLUMNS": "300"}  # rich wraps the live lines at the terminal's width
    plan = tuner("plan", str(study), "--n-trials", "4", cwd=tmp_path, env=wide)
    assert plan.returncode == 0, plan.stderr
    # the live line: each scenario's own score and figures, not the pooled figures
    live = re.findall(r"^trial \d: score .*$", plan.stderr, re.M)
    assert len(live) == 4
    for line in live:
        assert " over the scenarios  chat: score " in line and " | doc: score " in line
    measured = [t for t in _trials(tmp_path, "e2e-simulated") if "scenarios" in t.user_attrs]
    assert measured
    for t in measured:
        found = t.user_attrs["scenarios"]
        assert set(found) == {"chat", "doc"}
        assert found["chat"]["metrics"]["completed"] == 16 == found["doc"]["metrics"]["completed"]
        assert t.user_attrs["score"] == pytest.approx(max(e["score"] for e in found.values()))
        assert t.user_attrs["completed"] == 32  # the trial's own figures pool both
        assert found["doc"]["metrics"]["mean_ttft_ms"] > found["chat"]["metrics"]["mean_ttft_ms"]
    table = tuner("trials", str(study), "--simulated", "--format", "csv", cwd=tmp_path)
    assert "chat:score" in table.stdout and "doc:p99_ttft_ms" in table.stdout
    front = tuner(
        "pareto", str(study), "--simulated", "--scenario", "doc", "--format", "json", cwd=tmp_path
    )
    assert front.returncode == 0, front.stderr
    doc = {t.number: t.user_attrs["scenarios"]["doc"]["metrics"] for t in measured}
    for row in json.loads(front.stdout):
        assert row["metrics"]["p99_ttft_ms"] == pytest.approx(doc[row["trial"]]["p99_ttft_ms"])
    titled = tuner("pareto", str(study), "--simulated", "--scenario", "doc", cwd=tmp_path)
    assert "Pareto front of e2e-simulated, scenario doc (its own figures)" in titled.stdout
    export = tuner("export", str(study), "--simulated", cwd=tmp_path).stdout
    assert "# workload: 2 scenarios, the score is the worst of theirs:" in export
    assert "#   chat (weight 3): random 256 in / 128 out, 16 prompts, 4 req/s" in export
    assert "#   doc (weight 1): random 2048 in / 128 out (±50%), 16 prompts" in export
    assert "SLO p99_ttft_ms<=20000" in export
    bad = tuner("pareto", str(study), "--simulated", "--scenario", "nope", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "chat, doc" in bad.stderr
    report = tuner("report", str(study), "--simulated", "--output", "r.html", cwd=tmp_path)
    page = (tmp_path / "r.html").read_text()
    assert report.returncode == 0 and "<h2>Scenarios</h2>" in page
    for name in ("chat", "doc"):  # a front per scenario, on its own figures
        assert f"Scenario {name}: p99_ttft_ms against mean_tpot_ms" in page


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"objective": {"mode": "capacity"}}, "capacity mode needs an SLO"),
        (
            {"workload": [{"name": "chat", "random_input_len": 64}]},
            "scenario 'chat' names no dataset_name",
        ),
        (
            {"workload": [{"name": "a", "dataset_name": "random"}] * 2},
            "scenario names repeat",
        ),
        (
            {"workload": SCENARIOS, "objective": {"mode": "multi"}},
            "multi takes one workload",
        ),
        (
            {
                "workload": [
                    SCENARIOS[0],
                    {"name": "doc", "dataset_name": "longdoc", "longdoc_lengths": [16384]},
                ]
            },
            "workload.doc: a long document of 16384 tokens",
        ),
    ],
)
def test_bad_capacity_and_scenario_input_is_one_line_and_exit_2(
    tmp_path: Path, tiny_model_dir: Path, change: dict, words: str
) -> None:
    study = sim_study(tmp_path, tiny_model_dir, **change)
    proc = tuner("plan", str(study), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    # one line per problem (the preflight reports them all in one pass), each `tuner: ...`
    lines = proc.stderr.splitlines()
    assert words in proc.stderr and "Traceback" not in proc.stderr
    assert lines and all(line.startswith("tuner: ") for line in lines), proc.stderr


def test_two_scenarios_in_run_share_one_engine_start(tmp_path: Path, tiny_model_dir: Path) -> None:
    mix = [
        {**s, "tokenizer": str(tiny_model_dir), "num_prompts": 8, "request_rate": 8}
        for s in SCENARIOS
    ]
    study = _study(tmp_path, tiny_model_dir, workload=mix, budget={"n_trials": 1})
    run = tuner("run", str(study), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    (base,) = _trials(tmp_path, "e2e")
    found = base.user_attrs["scenarios"]
    assert [found[n]["metrics"]["completed"] for n in ("chat", "doc")] == [8, 8]
    assert base.user_attrs["completed"] == 16 and base.user_attrs["score"] == 0.0
    with sqlite3.connect(tmp_path / "tuner.db") as db:
        assert db.execute("SELECT COUNT(*) FROM tuner_engines").fetchone()[0] == 1
        assert db.execute("SELECT COUNT(*) FROM tuner_requests").fetchone()[0] == 16
    runs = base.user_attrs["prefix_cache_runs"]  # each scenario measured cold
    assert [r["scenario"] for r in runs] == ["chat", "doc"]
    assert all(r["reset"] and r["hit_rate"] < 0.05 for r in runs)
