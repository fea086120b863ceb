"""Engine time: the planner's start-up, and `engine_s` added up per run and per study."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tuner.run.pipeline import Outcome
from tuner.run.summary import RunSummary
from tuner.sim.boot import estimated_startup_s
from tuner.trial import TrialRecord
from tuner.trial.payloads import StartupPhases
from tuner.trial.uptime import median_startup_s, study_line, summary_line


def test_estimated_startup_for_4x_a6000_and_the_32b_model() -> None:
    # 30 s base + 65.5 GB at 2 GB/s + 25 s of CUDA graphs: the documented ~88 s.
    flags = {"tensor-parallel-size": 4}
    assert estimated_startup_s("deepseek-r1-distill-qwen-32b", "a6000", flags) == pytest.approx(
        88, abs=1.5
    )
    eager = estimated_startup_s("deepseek-r1-distill-qwen-32b", "a6000", {"enforce-eager": True})
    assert eager == pytest.approx(63, abs=1.5)  # no graph capture
    assert estimated_startup_s("anything", "cpu", {}) == 53.0  # benchmarks/cpu_startup.py
    assert median_startup_s([40.0, None, 0, 50.0, 90.0, "x"]) == 50.0
    assert median_startup_s([]) is None


def test_engine_s_is_added_up_over_every_kind_of_trial() -> None:
    s = RunSummary("s")
    s.count(0, Outcome("measured", [0.0], {}, TrialRecord(engine_s=100.0)))
    s.count(1, Outcome("measured", [0.0], {}, TrialRecord(engine_s=120.0)))
    s.count(2, Outcome("refused", None, {}, TrialRecord(engine_s=0.0), saved_by="rules"))
    s.count(3, Outcome("reused", [0.0], {}, TrialRecord(engine_s=0.0), saved_by="reuse"))
    s.count(4, Outcome("pruned", None, {}, TrialRecord(engine_s=30.0, engine_full_s=150.0)))
    s.count(5, Outcome("pruned", None, {}, TrialRecord(engine_s=40.0)))  # a real one: no full
    s.count(6, Outcome("failed", None, {}, TrialRecord(engine_s=10.0)))
    assert s.engine_s == pytest.approx(300.0)
    assert s.measured_engine_s == [100.0, 120.0]
    line = summary_line(s)
    assert line.startswith("engine time used 300 s")
    # 1 launch never made × 110 s (the mean of measured trials; a rule's refusal is no
    # saving); stopped: (150 - 30) from the
    # planner's full length plus (110 - 40) estimated from the mean.
    assert "saved by precheck/reuse about 110 s" in line
    assert "saved by early stopping about 190 s (2 trial(s) stopped; estimate)" in line


def test_prediction_skips_claim_no_calibration() -> None:
    """`tuner plan` on a built-in profile said "ruled out by the calibrated simulator" two
    lines below its own "never fitted to this box (uncalibrated)" (the walk of issue 49/50):
    the skip predicts on the study's profile, calibrated or not."""
    s = RunSummary("s")
    s.count(0, Outcome("measured", [0.0], {}, TrialRecord(engine_s=92.0)))
    s.saved_by_prediction, s.prediction_saved_s = 3, 275.0
    line = summary_line(s)
    assert "about 275 s (3 launch(es) ruled out by the simulator's prediction" in line
    assert "calibrated" not in line


def test_the_start_up_split_sums_to_engine_s_and_is_counted() -> None:
    ready = TrialRecord(startup_s=30.0, workload_s=70.0, engine_s=100.0)
    never_ready = TrialRecord(workload_s=0.0, engine_s=12.0)  # all of it spent starting
    assert ready.engine_split_s == (30.0, 70.0)
    assert never_ready.engine_split_s == (12.0, 0.0)
    assert TrialRecord(engine_s=0.0, startup_s=5.0).engine_split_s is None  # not launched
    assert TrialRecord(engine_s=50.0).engine_split_s is None  # stored without the split
    s = RunSummary("s")
    s.count(0, Outcome("measured", [0.0], {}, ready))
    s.count(1, Outcome("failed", None, {}, never_ready))
    assert s.startup_s == pytest.approx(42.0)
    assert summary_line(s).startswith("engine time used 112 s (42 s of it, 38%, starting engines)")
    points = [SimpleNamespace(status="feasible", record=ready)]
    points.append(SimpleNamespace(status="failed", record=never_ready))
    assert study_line(points) == (
        "112 s of engine time over 2 launched trial(s), of which 42 s (38%) starting engines"
    )


def test_study_line_sums_the_stored_trials() -> None:
    def point(status: str, **attrs: float) -> SimpleNamespace:
        return SimpleNamespace(status=status, record=TrialRecord(**attrs))

    points = [
        point("feasible", engine_s=100.0),
        point("failed", engine_s=0.0),  # refused: never launched
        point("pruned", engine_s=30.0, engine_full_s=150.0),
        point("pruned", engine_s=0.0),  # a reused stopped result
    ]
    assert study_line(points) == (
        "130 s of engine time over 2 launched trial(s); 1 stopped early, using 30 s instead of "
        "150 s"
    )
    assert study_line(points[:2]) == "100 s of engine time over 1 launched trial(s)"


def test_the_planners_startup_prefers_the_study_file_then_measured_ones(tiny_model_dir) -> None:
    from tuner.runners.plan import PlanRunner
    from tuner.spec.study import StudySpec

    data = {
        "name": "p",
        "engine": {"model": "deepseek-r1-distill-qwen-32b", "flags": {"tensor-parallel-size": 4}},
        "hardware": {"gpu": "a6000", "count": 4},
        "search_space": {"parameters": {"max-num-seqs": {"type": "int", "low": 8, "high": 16}}},
        "workload": {"tokenizer": str(tiny_model_dir)},
    }
    spec = StudySpec.model_validate(data)
    assert PlanRunner(spec).startup_s({}) == pytest.approx(88, abs=1.5)
    assert PlanRunner(spec, measured_startup_s=140.0).startup_s({}) == 140.0
    data["hardware"]["startup_s"] = 200.0
    spec = StudySpec.model_validate(data)
    assert PlanRunner(spec, measured_startup_s=140.0).startup_s({}) == 200.0


def test_the_study_line_names_the_cold_compiles_real_engines_logged() -> None:
    cold = StartupPhases(compile_s=40.0, compile_cached=False)
    cached = StartupPhases(compile_s=5.0, compile_cached=True)

    def point(phases: StartupPhases, simulated: bool = False) -> SimpleNamespace:
        record = TrialRecord(engine_s=100.0, startup_s=60.0, workload_s=40.0, startup_phases=phases)
        return SimpleNamespace(status="feasible", record=record, simulated=simulated)

    line = study_line([point(cold), point(cached), point(cold, simulated=True)])
    assert line.endswith("starting engines (40 s of it compiling cold, 1 start(s))"), line
