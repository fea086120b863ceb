"""The robustness check measured on the engine (`tuner run --confirm`): real `tuner sim serve`
processes, real HTTP on loopback, real SQLite."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest

from tuner import trial as tr
from tuner.fidelity import robustness as rb
from tuner.fidelity import robustness_measured as rm
from tuner.runners.engine_runner import EngineRunner
from tuner.spec.study import load_study_spec
from tuner.testing import sim_study, tuner
from tuner.trial import TrialPoint

pytestmark = pytest.mark.slow  # whole studies: `make test`, not `make test-fast`

BASE = {"max-num-seqs": 256, "max-num-batched-tokens": 2048, "gpu-memory-utilization": 0.9}
# The demo's kind of load, smaller: ~2k-token prompts near the box's prefill capacity, where
# vLLM's default chunk budget stalls the decodes in flight and 1024 tokens cuts TPOT.
LOADED = {
    "random_input_len": 2048,
    "random_output_len": 32,
    "random_range_ratio": 0.2,
    "num_prompts": 16,
    "request_rate": 2.2,
}


def test_run_names_are_scenario_names():
    names = [rm.run_name(p) for p in (rb.NOMINAL, *rb.PERTURBATIONS)]
    assert names == [
        "nominal",
        "prompts_minus_3pct",
        "prompts_plus_3pct",
        "rate_minus_10pct",
        "rate_plus_10pct",
    ]


def test_the_perturbations_run_on_two_engine_starts(tmp_path: Path, tiny_model_dir):
    spec = load_study_spec(sim_study(tmp_path, tiny_model_dir, workload=LOADED))
    runner = EngineRunner(spec, tmp_path / "logs", f"sqlite:///{tmp_path}/t.db")
    mine = {**BASE, "max-num-batched-tokens": 1024, "max-num-seqs": 64}
    gains, runs, failure = rm.measured_gains(spec, runner, mine, BASE)
    assert failure is None
    assert list(gains) == ["nominal", *(p.name for p in rb.PERTURBATIONS)]
    assert all(g is not None and math.isfinite(g) for g in gains.values())
    # each run is the perturbed workload, measured: lengths ±3 %, and a rate 10 % lower
    # stretches the run (same requests, later arrivals)
    base = {name: r["baseline"] for name, r in runs.items()}
    tokens = base["nominal"]["total_input_tokens"]
    assert base["prompts +3%"]["total_input_tokens"] == pytest.approx(tokens * 1.03, rel=0.005)
    assert base["prompts -3%"]["total_input_tokens"] == pytest.approx(tokens * 0.97, rel=0.005)
    assert base["rate -10%"]["total_input_tokens"] == tokens
    assert base["rate -10%"]["duration"] > base["rate +10%"]["duration"]
    assert all(r["config"]["completed"] == LOADED["num_prompts"] for r in runs.values())
    # the budget near 1024 tokens wins on this load, as the simulated check says it should
    assert gains["nominal"] > 0.05
    # two engine starts: one for the config, one for the baseline
    logs = [p for p in (tmp_path / "logs").rglob("*") if p.is_file()]
    assert len(logs) == 2, logs


def test_a_failed_engine_is_not_checked(tmp_path: Path, tiny_model_dir):
    spec = load_study_spec(sim_study(tmp_path, tiny_model_dir, workload=LOADED))
    runner = EngineRunner(spec, tmp_path / "logs", f"sqlite:///{tmp_path}/t.db")
    # 20 % of a 48 GB A6000 does not hold a quarter of a 32B model's weights: the simulated
    # engine refuses to start, as vLLM does when no memory is left for the KV cache
    refused = {**BASE, "gpu-memory-utilization": 0.2}
    points = [
        TrialPoint(0, "COMPLETE", BASE, {"p99_ttft_ms": 2.0}, "feasible", score=0.0, baseline=True),
        TrialPoint(1, "COMPLETE", refused, {"p99_ttft_ms": 1.0}, "feasible", score=-0.1),
    ]

    class Study:  # what the check writes to: the study's user attrs
        def __init__(self) -> None:
            self.user_attrs: dict = {}

        def set_user_attr(self, key: str, value: object) -> None:
            self.user_attrs[key] = value

    study = Study()
    record = rm.check_best_measured(study, spec, points, runner)
    assert record is not None and record.fragile is None
    assert record.verdict.startswith("not checked on the engine: the config failed")
    assert study.user_attrs == {f"{tr.ROBUSTNESS_MEASURED}1": record.encode()}


def test_the_measured_verdict_wins_over_the_simulated_one():
    point = TrialPoint(3, "COMPLETE", BASE, {}, "feasible", spec_id="s1")
    simulated = {"spec_id": "s1", "verdict": "robust (SIMULATED)"}  # as stored
    measured = {"spec_id": "s1", "verdict": "FRAGILE (measured on the engine)", "runs": {}}

    def shown(attrs: dict) -> str | None:
        found = tr.StudyRecord.decode(attrs).robustness_of(point)
        return found.verdict if found is not None else None

    assert shown({f"{tr.ROBUSTNESS}3": simulated}) == simulated["verdict"]
    both = {f"{tr.ROBUSTNESS}3": simulated, f"{tr.ROBUSTNESS_MEASURED}3": measured}
    assert shown(both) == measured["verdict"]
    stale = {**both, f"{tr.ROBUSTNESS_MEASURED}3": {**measured, "spec_id": "old"}}
    assert shown(stale) == simulated["verdict"]  # measured under another spec


def test_run_confirm_measures_the_check_and_best_prints_it(tmp_path: Path, tiny_model_dir):
    study = sim_study(
        tmp_path,
        tiny_model_dir,
        workload=LOADED,
        search={"fidelity": "multi", "candidates": 32},
        budget={"n_trials": 3},
        trial={"stall_timeout_s": 20, "confirm_repeats": 1},
    )
    run = tuner("run", str(study), "--confirm", "1", cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "re-measuring trial" in run.stderr
    s = optuna.load_study(study_name="e2e", storage=f"sqlite:///{tmp_path}/tuner.db")
    best = tuner("best", str(study), cwd=tmp_path)
    assert best.returncode == 0, best.stderr
    number = int(best.stdout.split("# best trial ")[1].split()[0])
    assert not s.trials[number].user_attrs.get(tr.BASELINE)  # the screen's configs beat it
    record = s.user_attrs[f"{tr.ROBUSTNESS_MEASURED}{number}"]
    assert set(record["gains"]) == {p.name for p in rb.PERTURBATIONS}
    assert set(record["runs"]) == {"nominal", *(p.name for p in rb.PERTURBATIONS)}
    assert f"# {record['verdict']}" in best.stdout
    assert "measured on the engine" in best.stdout
    assert f"{tr.ROBUSTNESS}{number}" in s.user_attrs  # the simulated check is kept too
