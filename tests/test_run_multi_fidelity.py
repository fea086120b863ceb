"""`search.fidelity: multi` end to end: `tuner run` on a simulated engine whose profile file is
a hidden truth (slower than the stock A6000 the study screens with). What is checked is the
loop's, the screen's and the results commands' logic, so the commands run in this process and
the engine is the simulation core (`tuner_testing.inprocess`), not `tuner sim serve`."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import optuna
import pytest

from tuner import trial as tr
from tuner.sim.profile_file import write_profile
from tuner.sim.profiles import get_gpu
from tuner.spec.figures import figure
from tuner_testing import sim_study
from tuner_testing.inprocess import tuner_in_process as tuner

pytestmark = pytest.mark.slow  # whole studies: `make test`, not `make test-fast`


def truth_profile(path: Path) -> Path:
    """Bandwidth −25 %, step overhead ×2, all-reduce ×3: what the study is not told."""
    a = get_gpu("a6000")
    truth = replace(
        a,
        name="a6000-truth",
        bandwidth_bytes_s=a.bandwidth_bytes_s * 0.75,
        allreduce_latency_s=a.allreduce_latency_s * 3,
        interconnect_bytes_s=a.interconnect_bytes_s / 3,
    ).with_constants(step_overhead_s=a.constants.step_overhead_s * 2)
    write_profile(truth, path)
    return path


def test_multi_fidelity_study_predicts_every_real_trial(tmp_path: Path, tiny_model_dir) -> None:
    truth = truth_profile(tmp_path / "truth.yaml")
    study = sim_study(
        tmp_path,
        tiny_model_dir,
        flags={"gpu": str(truth)},
        search={"fidelity": "multi", "candidates": 32},
        budget={"n_trials": 6},
    )
    run = tuner("run", str(study), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.starts[:6] == [f"trial-{n:04d}" for n in range(6)]  # one engine start a trial
    s = optuna.load_study(study_name="e2e", storage=f"sqlite:///{tmp_path}/tuner.db")
    trials = s.trials
    assert len(trials) == 6 and trials[0].user_attrs[tr.BASELINE]
    for t in trials[1:]:  # every real trial after the baseline: the screen's choice
        u = t.user_attrs
        assert u[tr.SCREEN]["screened"] >= 1, t.number
        assert tr.is_finite(u["predicted_p99_ttft_ms"]) and tr.is_finite(u[tr.PREDICTED_SCORE])
        assert set(u[tr.PREDICTION_ERROR]) >= {"p99_ttft_ms", "mean_tpot_ms", "score"}
    # the truth is slower than the study's profile (uncalibrated, TPOT would be under-predicted
    # by >10 %): the screen calibrates on the baseline alone, so the first screened trial is
    # already predicted close
    assert trials[1].user_attrs[tr.SCREEN]["calibrated_on"] == 1
    assert abs(trials[1].user_attrs[tr.PREDICTION_ERROR]["mean_tpot_ms"]) < 0.1
    # recalibrated after the real trials: the profile is written, with its fitted factors
    calibration = s.user_attrs[tr.CALIBRATION]
    assert calibration["observations"] >= 4 and calibration["factors"]
    fitted = calibration["profile"]
    assert fitted["constants"]["step_overhead_s"] != get_gpu("a6000").constants.step_overhead_s
    assert trials[-1].user_attrs[tr.SCREEN]["calibrated_on"] >= 4

    rows = json.loads(tuner("trials", str(study), "--format", "json", cwd=tmp_path).stdout)
    assert rows[0]["predicted_p99_ttft_ms"] is None  # the baseline is not screened
    assert all(r["predicted_p99_ttft_ms"] is not None for r in rows[1:])
    keys = list(rows[1])  # the prediction beside the figure (after its simulated band)
    at = keys.index("p99_ttft_ms")
    assert keys[at + 1 : at + 3] == ["p99_ttft_ms_band", "predicted_p99_ttft_ms"], keys
    best = tuner("best", str(study), cwd=tmp_path)
    assert best.returncode == 0, best.stderr
    number = int(best.stdout.split("# best trial ")[1].split()[0])
    # `best` reads measured figures only: the measured score, never the predicted one
    top = trials[number]
    assert f"score {top.user_attrs[tr.SCORE]:+.3f}" in best.stdout
    assert top.values[0] == top.user_attrs[tr.SCORE]  # what Optuna was told: measured
    if tr.PREDICTED_SCORE in top.user_attrs:  # the best may be the (unscreened) baseline
        assert top.user_attrs[tr.PREDICTED_SCORE] != top.user_attrs[tr.SCORE]
    table = tuner("trials", str(study), "--wide", cwd=tmp_path)
    assert table.returncode == 0
    assert "predicted P99 TTFT (ms)" in table.stdout
    assert figure(trials[1].user_attrs["predicted_p99_ttft_ms"]) in table.stdout
