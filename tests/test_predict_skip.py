"""Prediction skips (issue 22 §2): the calibrated simulator rules a config out before launch,
with its margin; never the baseline or a queued config; off with a flag or a setting."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from tuner.fidelity import predict_skip as ps
from tuner.results.views import trials_frame
from tuner.run.loop import StudyLoop
from tuner.runners.plan import PlanRunner
from tuner.spec.study import StudySpec
from tuner.store.storage import Store
from tuner.trial import read_all

SPACE = {
    "parameters": {
        # 1 or 2 sequences at a time cannot keep up with 8 req/s of long answers
        "max-num-seqs": {"type": "int", "low": 1, "high": 256, "log": True},
        "max-num-batched-tokens": {"type": "int", "low": 1024, "high": 8192, "log": True},
    }
}
HOPELESS = {"max-num-seqs": 1, "max-num-batched-tokens": 8192}


def _spec(tiny_model_dir: Path, **pruning: object) -> StudySpec:
    return StudySpec.model_validate(
        {
            "name": "skip",
            "engine": {
                "model": "deepseek-r1-distill-qwen-32b",
                "flags": {"tensor-parallel-size": 4, "max-model-len": 8192},
            },
            "hardware": {"gpu": "a6000", "count": 4},
            "search_space": SPACE,
            "workload": {
                "tokenizer": str(tiny_model_dir),
                "num_prompts": 24,
                "random_input_len": 128,
                "random_output_len": 256,
                "request_rate": 8,
            },
            "objective": {"slo": ["p99_ttft_ms<=2000"]},
            "budget": {"n_trials": 12},
            "sampler": {"name": "tpe", "seed": 3},
            "pruning": {"enabled": False, **pruning},  # prediction skips alone
        }
    )


def _run(spec: StudySpec, tmp_path: Path, *, skip: bool = True, queue: bool = False):
    store = Store(f"sqlite:///{tmp_path}/{skip}-{queue}.db")
    loop = StudyLoop(spec, store, PlanRunner(spec), prediction_skip=skip)
    if queue:
        loop.study.enqueue_trial(HOPELESS)
    summary = loop.run()
    points = read_all(store.load_study("skip-simulated").get_trials())
    store.close()
    return summary, points


@pytest.fixture(scope="module")
def skipped(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    return _run(_spec(tiny_model_dir), tmp_path_factory.mktemp("skip"))


def test_hopeless_configs_are_ruled_out_with_prediction_and_margin(skipped) -> None:
    summary, points = skipped
    out = [p for p in points if ps.ruled_out(p)]
    assert out, "no config was ruled out"
    # nothing is ruled out before a launched trial calibrates the simulator
    assert not ps.ruled_out(points[0]) and points[0].record.engine_s
    for p in out:
        sp = p.record.skip_prediction
        assert p.status == "pruned" and p.record.engine_s == 0.0
        assert p.record.pruned_reason.startswith("ruled out by prediction: predicted ")
        assert sp.margin["p99_ttft_ms"] > 0 and sp.engine_s > 0
        # ruled out only when even the margin in its favour leaves the SLO broken
        assert sp.metrics["p99_ttft_ms"] * math.exp(-sp.margin["p99_ttft_ms"]) > 2000
        if sp.errors_from < ps.MIN_ERRORS:  # too few misses measured: the stated margin
            assert sp.margin["p99_ttft_ms"] == pytest.approx(ps.CONSERVATIVE_MARGIN)
    launched = [p for p in points if not ps.ruled_out(p) and p.record.engine_s]
    assert launched and all(p.record.skip_prediction is not None for p in launched)
    assert summary.saved_by_prediction == len(out)
    assert summary.prediction_saved_s > 0
    rows = {r["number"]: r for r in trials_frame(points).to_dict("records")}
    assert all(rows[p.number]["state"] == "RULED OUT (predicted)" for p in out)
    assert all(rows[p.number]["saved_engine_s"] > 0 for p in out)


def test_turned_off_by_flag_or_setting(tiny_model_dir: Path, tmp_path: Path) -> None:
    for spec, skip in (
        (_spec(tiny_model_dir), False),  # --no-prediction-skip
        (_spec(tiny_model_dir, prediction_skip=False), True),  # pruning.prediction_skip
    ):
        (tmp_path / str(skip)).mkdir()
        summary, points = _run(spec, tmp_path / str(skip), skip=skip)
        assert summary.saved_by_prediction == 0
        assert all(p.record.skip_prediction is None for p in points)


def test_a_queued_config_is_launched_whatever_is_predicted(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    spec = _spec(tiny_model_dir)
    store = Store(f"sqlite:///{tmp_path}/q.db")
    loop = StudyLoop(spec, store, PlanRunner(spec))
    loop.run(n_trials=3)  # measured trials: the simulator is calibrated
    loop.study.enqueue_trial(HOPELESS)
    loop.run(n_trials=1)
    points = read_all(store.load_study("skip-simulated").get_trials())
    queued = next(p for p in points if p.params == HOPELESS and p.record.engine_s)
    sp = queued.record.skip_prediction
    assert not ps.ruled_out(queued) and sp is not None
    # predicted to break the SLO beyond its margin, and launched all the same; it did break it
    assert sp.metrics["p99_ttft_ms"] * math.exp(-sp.margin["p99_ttft_ms"]) > 2000
    assert queued.status == "infeasible"


def test_run_and_plan_take_no_prediction_skip(tmp_path: Path) -> None:
    from tuner.testing import tuner

    for command in ("run", "plan"):
        out = tuner(command, "--help", cwd=tmp_path, env={**os.environ, "COLUMNS": "200"})
        assert out.returncode == 0 and "--no-prediction-skip" in out.stdout


def test_the_score_is_trusted_to_5_percent_of_its_heaviest_metric(tiny_model_dir: Path) -> None:
    """A factor of 2 on every figure moves the score by Σ|w|·ln 2; 5 % on one figure by at
    most max|w|·0.05. The floor is the latter: Σ|w|·0.05 hid predictions measured to 0.005."""
    spec = _spec(tiny_model_dir)
    weights = {"p99_ttft_ms": 2.0, "mean_tpot_ms": 1.0, "output_throughput": 1.0}
    spec = spec.model_copy(
        update={"objective": spec.objective.model_copy(update={"weights": weights})}
    )
    skip = ps.PredictionSkip(spec, list)
    assert skip.score_scale == pytest.approx(4.0)
    assert skip.score_floor == pytest.approx(ps.MIN_MARGIN * 2.0)


def _launched(ttft_ms: float, score: float, raw_ttft_ms: float, raw_score: float):
    """A launched trial measured whole, as `_misses` reads it."""
    from types import SimpleNamespace

    from tuner.trial import SkipPrediction

    pred = SkipPrediction(raw={"p99_ttft_ms": raw_ttft_ms}, raw_score=raw_score)
    return SimpleNamespace(
        record=SimpleNamespace(skip_prediction=pred),
        measured=True,
        partial=False,
        metrics={"p99_ttft_ms": ttft_ms},
        score=score,
        baseline=False,
    )


def test_configs_predicted_alike_are_one_miss_and_few_misses_a_wide_margin() -> None:
    alike = [_launched(1200.0, 0.12, 1000.0, -0.2) for _ in range(3)]
    misses = ps._misses([*alike, _launched(900.0, 0.0, 1000.0, -0.1)])
    assert len(misses) == 2  # three identical predictions: one piece of evidence
    assert misses[0]["p99_ttft_ms"] == pytest.approx(math.log(1.2))
    assert misses[0][ps.SCORE] == pytest.approx(0.32)
    # the same spread of misses, from 3 and from 17 distinct predictions: the bound from 3 is
    # the wider (the largest of 3 says less about the next miss)
    few = [0.30, 0.32, 0.34]
    many = [0.30, 0.32, 0.34] * 5 + [0.31, 0.33]
    assert ps._margin(few, 0.32) > ps._margin(many, 0.32) > ps.SAFETY * 0.02
