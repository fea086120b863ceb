"""Early stopping end to end: `tuner run` on `tuner sim serve`, `tuner plan`, bad settings."""

from __future__ import annotations

import json
import time
from pathlib import Path

import optuna
import pytest

from tuner.spec.study import StudySpec
from tuner.trial import read_all
from tuner_testing import sim_study, sim_time_scale, tuner

pytestmark = pytest.mark.slow  # whole studies: `make test`, not `make test-fast`

OVERLOADED = {
    # One sequence at a time, 24 requests at 16 req/s: the queue only grows.
    "parameters": {
        "max-num-seqs": {"type": "categorical", "choices": [1]},
        "gpu-memory-utilization": {"type": "float", "low": 0.8, "high": 0.9, "step": 0.05},
    }
}
WORKLOAD = {"num_prompts": 24, "request_rate": 16, "random_output_len": 32}
SLO = {"slo": ["p99_ttft_ms<=1000"]}


def _study(tmp_path: Path, tiny_model_dir: Path) -> Path:
    return sim_study(
        tmp_path,
        tiny_model_dir,
        workload=WORKLOAD,
        search_space=OVERLOADED,
        objective=SLO,
        pruning={"check_every_s": 1.0},
    )


def _points(tmp_path: Path, name: str = "e2e"):
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path}/tuner.db")
    return read_all(study.trials)


def test_overloaded_config_is_stopped_early_and_the_study_goes_on(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    study = _study(tmp_path, tiny_model_dir)
    t0 = time.monotonic()
    run = tuner("run", str(study), "--n-trials", "2", cwd=tmp_path)
    pruned_wall = time.monotonic() - t0
    assert run.returncode == 0, run.stderr
    said = " ".join(run.stderr.split())  # the summary line wraps at the console's width
    assert "stopped early" in said and "saved by early stopping" in said
    points = _points(tmp_path)
    assert {p.status for p in points} == {"pruned"}  # every one stopped, the study went on
    launched = [p for p in points if "reused_from" not in p.attrs]
    assert len(launched) == 2
    for p in launched:
        assert p.attrs["partial"] is True
        assert "p99_ttft_ms<=1000 broken for sure" in p.attrs["pruned_reason"]
        # The engine's /metrics, scraped at the checkpoint, is the stated evidence.
        assert "waiting in the engine's queue" in p.attrs["pruned_reason"]
        assert p.attrs["pruned_queue_waiting"] >= 1 and 0 <= p.attrs["pruned_kv_cache_usage"] <= 1
        assert p.attrs["pruned_at_s"] < 8  # the full run takes about 24 × 0.8 s
        # wall seconds (start-up included) against simulated ones: on the same clock
        assert p.attrs["engine_s"] > p.attrs["pruned_at_s"] / sim_time_scale()
        assert p.attrs.get("completed", 0) < 24
    rows = tuner("trials", str(study), "--format", "json", cwd=tmp_path)
    assert '"state":"PRUNED"' in rows.stdout.replace(" ", "")
    assert "stopped early: SLO" in rows.stdout
    launched_rows = [row for row in json.loads(rows.stdout) if row["reused_from"] is None]
    assert launched_rows and all(row["engine_s"] > 0 for row in launched_rows)
    for row in launched_rows:  # the split on every launched trial: start-up, then the rest
        assert row["startup_s"] > 0 and row["workload_s"] > 0
        assert row["startup_s"] + row["workload_s"] == pytest.approx(row["engine_s"])
    assert "starting engines)" in said  # the run summary's share
    csv = tuner("trials", str(study), "--format", "csv", cwd=tmp_path)
    assert "engine_s" in csv.stdout.splitlines()[0].split(",")
    table = tuner("trials", str(study), "--wide", cwd=tmp_path)
    assert "engine (s)" in table.stdout and "PRUNED" in table.stdout
    best = tuner("best", str(study), cwd=tmp_path)
    assert "vllm serve" not in best.stdout  # a pruned trial is never the best

    t0 = time.monotonic()
    full = tuner("run", str(study), "--n-trials", "1", "--no-pruning", cwd=tmp_path)
    full_wall = time.monotonic() - t0
    assert full.returncode == 0, full.stderr
    last = _points(tmp_path)[-1]
    assert last.state == "COMPLETE" and last.status == "infeasible"  # ran to the end
    assert last.metrics["completed"] == 24 and "partial" not in last.attrs
    assert last.attrs["engine_s"] > max(p.attrs["engine_s"] for p in launched)
    assert full_wall > pruned_wall / 2  # one full trial outlasts two stopped ones' share


def test_plan_applies_the_same_rule_in_virtual_time(tiny_model_dir: Path, tmp_path) -> None:
    from tuner.run.loop import StudyLoop
    from tuner.runners.plan import PlanRunner
    from tuner.store.storage import Store

    data = {
        "name": "plan",
        "engine": {
            "model": "deepseek-r1-distill-qwen-32b",
            "flags": {"tensor-parallel-size": 4, "max-model-len": 8192},
        },
        "hardware": {"gpu": "a6000", "count": 4},
        "search_space": OVERLOADED,
        "workload": {"tokenizer": str(tiny_model_dir), "random_input_len": 128, **WORKLOAD},
        "objective": SLO,
        "pruning": {"check_every_s": 100, "check_every_requests": 2},
    }
    spec = StudySpec.model_validate(data)
    for pruning, status in ((True, "pruned"), (False, "infeasible")):
        store = Store(f"sqlite:///{tmp_path}/{pruning}.db")
        loop = StudyLoop(spec, store, PlanRunner(spec), pruning=pruning)
        params = {"max-num-seqs": 1, "gpu-memory-utilization": 0.85}
        loop.study.enqueue_trial(params)
        loop.study.enqueue_trial(params)
        summary = loop.run(n_trials=1)
        loop.run(n_trials=1)  # the second enqueued trial first: same parameters
        p, again, *_ = read_all(store.load_study("plan-simulated").get_trials())
        # The same config again: its result is reused, not launched, and keeps its state.
        assert again.attrs["reused_from"] == 0 and again.status == status
        assert again.attrs["engine_s"] == 0
        assert p.status == status
        if pruning:
            assert (
                p.attrs["engine_full_s"]
                > p.attrs["engine_s"]
                == pytest.approx(p.attrs["startup_s"] + p.attrs["pruned_at_s"])
            )
            assert summary.pruned and summary.pruned[0][1] == p.attrs["engine_full_s"]
            # Checked at the 2nd completed request (no 100 s checkpoint came first), with the
            # simulated engine's queue read as a scrape would have read it then.
            assert "(2 of 24 requests done" in p.attrs["pruned_reason"]
            assert "waiting in the engine's queue" in p.attrs["pruned_reason"]
            assert p.attrs["pruned_queue_waiting"] >= 1
        store.close()


@pytest.mark.parametrize(
    "pruning",
    [
        {"enabled": "sometimes"},
        {"min_fraction": 2},
        {"check_every_s": 0},
        {"stop_early": True},
        {"min_completed": 0},
        {"check_every_requests": 0},
        {"check_every_requests": "often"},
        {"queue_growth": 0},
    ],
)
def test_bad_pruning_settings_are_one_line_exit_2(
    tmp_path: Path, tiny_model_dir: Path, pruning: dict
) -> None:
    study = sim_study(tmp_path, tiny_model_dir, pruning=pruning)
    run = tuner("plan", str(study), "--n-trials", "1", cwd=tmp_path)
    assert run.returncode == 2
    assert len(run.stderr.strip().splitlines()) == 1 and "pruning" in run.stderr
