"""A study's trials as calibration input (tuner.fidelity.calibration), and `tuner calibrate`
end to end on a simulated engine with a hidden truth profile (tuner.commands.calibrate). The
commands run in this process, the engine the simulation core (`tuner_testing.inprocess`:
measured trials, as on `tuner sim serve`, without its processes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tuner.sim.profile_file import load_gpu, profile_to_yaml
from tuner.sim.profiles import GPUS
from tuner.spec.study import load_study_spec
from tuner.trial import PARTIAL, PLANNED_VERSION, VLLM_VERSION, StudyRecord, TrialPoint
from tuner_testing import sim_study
from tuner_testing.inprocess import tuner_in_process as tuner

pytestmark = pytest.mark.slow  # whole studies: `make test`, not `make test-fast`


def _truth_file(tmp_path: Path) -> Path:
    """The A6000 with 25 % less bandwidth and twice the step overhead: the 'real' GPU."""
    data = yaml.safe_load(profile_to_yaml(GPUS["a6000"]))
    data["bandwidth_bytes_s"] *= 0.75
    data["constants"]["step_overhead_s"] *= 2
    path = tmp_path / "truth.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _point(number: int, **attrs) -> TrialPoint:
    return TrialPoint(
        number=number,
        state="COMPLETE",
        params={"max-num-seqs": 8 * (number + 1)},
        metrics={"p99_ttft_ms": 100.0, "mean_tpot_ms": 30.0, "output_throughput": 500.0},
        status="feasible",
        attrs=attrs,
    )


def test_only_trials_an_engine_measured_in_full_are_observations(tmp_path, tiny_model_dir):
    from tuner.fidelity.calibration import observations

    spec = load_study_spec(sim_study(tmp_path, tiny_model_dir))
    points = [
        _point(2, **{VLLM_VERSION: "sim-0.1"}),
        _point(0, **{VLLM_VERSION: "0.11.0"}),
        _point(1, **{VLLM_VERSION: PLANNED_VERSION}),  # `tuner plan`: a prediction
        _point(3, **{VLLM_VERSION: "0.11.0", PARTIAL: True}),  # stopped early
        _point(4, **{VLLM_VERSION: "0.11.0", "reused_from": 0}),  # not measured itself
    ]
    obs = observations(spec, StudyRecord(), points)
    assert [o.trial for o in obs] == [0, 2]
    assert obs[0].flags["max-num-seqs"] == 8 and obs[0].flags["tensor-parallel-size"] == 4
    assert obs[0].flags["gpu"] == "a6000"  # the sim-only flag rides along, as in `tuner plan`


def test_calibrate_fits_a_hidden_truth_end_to_end(tmp_path, tiny_model_dir):
    truth = _truth_file(tmp_path)
    study = sim_study(
        tmp_path,
        tiny_model_dir,
        flags={"gpu": str(truth)},  # the engine runs on the truth; the study is told a6000
        workload={"num_prompts": 12, "random_output_len": 32, "request_rate": 8},
        budget={"n_trials": 4},
    )
    first = tuner("run", str(study), "--n-trials", "2", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    # Two trials: fitted with the search loop's prior, the error in-sample (none held out)
    few = tuner("calibrate", str(study), "-o", "few.yaml", cwd=tmp_path)
    assert few.returncode == 0, few.stderr
    assert "2 trial(s) fix little" in few.stdout and "in-sample, 2 trials" in few.stdout

    more = tuner("run", str(study), cwd=tmp_path)
    assert more.returncode == 0, more.stderr
    elsewhere = tmp_path / "elsewhere"  # not the study's directory: paths differ from there
    elsewhere.mkdir()
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    out = tuner("calibrate", "../study.yaml", "-o", "../cal.yaml", "--folds", "2",
                "--storage", db, cwd=elsewhere)  # fmt: skip
    assert out.returncode == 0, out.stderr
    # what the study file must say: relative to the study's directory, not to the cwd
    assert "`hardware.profile: cal.yaml`" in out.stdout, out.stdout
    assert "SIMULATED engine" in out.stdout and "held out (2-fold)" in out.stdout
    for metric in ("p99_ttft_ms", "mean_tpot_ms", "output_throughput"):
        assert metric in out.stdout

    fitted, base, real = load_gpu(str(tmp_path / "cal.yaml")), GPUS["a6000"], load_gpu(str(truth))

    def decode_bw(gpu):
        return gpu.bandwidth_bytes_s * gpu.constants.bandwidth_efficiency

    # the fitted profile's decode bandwidth moved from the stock figure toward the truth
    assert abs(decode_bw(fitted) - decode_bw(real)) < 0.5 * abs(decode_bw(base) - decode_bw(real))
    assert "calibrated on" in fitted.description

    # the written file is a study's hardware.profile
    data = yaml.safe_load(study.read_text())
    data["hardware"] = {"profile": "cal.yaml", "count": 4}
    study.write_text(yaml.safe_dump(data))
    assert load_gpu(load_study_spec(study).hardware.accelerator) == fitted


def test_calibrate_refuses_a_study_without_a_profile_or_trials(tmp_path, tiny_model_dir):
    study = sim_study(tmp_path, tiny_model_dir, hardware={"count": 4})
    out = tuner("calibrate", str(study), "-o", "cal.yaml", cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr

    data = yaml.safe_load(study.read_text())
    data["hardware"] = {"profile": "missing.yaml", "count": 4}  # TP=4 fits: one problem
    study.write_text(yaml.safe_dump(data))
    out = tuner("run", str(study), cwd=tmp_path)
    assert out.returncode == 2 and "missing.yaml: profile file not found" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_calibrate_works_from_one_trial_and_leaves_stopped_ones_out(tmp_path, tiny_model_dir):
    """A 5-trial study whose 4 trials after the baseline were stopped early: `tuner calibrate`
    fits the search loop's prior to the one trial measured in full, writes the profile, says
    which trial it used and why the others were left out, and that its error is in-sample."""
    space = {
        "parameters": {
            # one sequence at a time, 24 requests at 16 req/s: the queue only grows, so every
            # trial but the baseline (never stopped: it is the reference) is stopped early
            "max-num-seqs": {"type": "categorical", "choices": [1], "default": 1},
            "gpu-memory-utilization": {
                "type": "float",
                "low": 0.8,
                "high": 0.9,
                "step": 0.05,
                "default": 0.9,
            },
        }
    }
    study = sim_study(
        tmp_path,
        tiny_model_dir,
        workload={"num_prompts": 24, "request_rate": 16, "random_output_len": 32},
        search_space=space,
        objective={"slo": ["p99_ttft_ms<=1000"]},
        pruning={"check_every_s": 1.0},
        trial={"stall_timeout_s": 5, "repeat_measured": True},  # a repeated config runs again
    )
    # stopped early, not ruled out before launch (tests/test_predict_skip.py)
    run = tuner("run", str(study), "--n-trials", "5", "--no-prediction-skip", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    rows = json.loads(tuner("trials", str(study), "--format", "json", cwd=tmp_path).stdout)
    assert [r["state"] for r in rows] == ["INFEASIBLE"] + ["PRUNED"] * 4, rows
    assert all(r["reused_from"] is None for r in rows)  # each one launched and stopped

    out = tuner("calibrate", str(study), "-o", "cal.yaml", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "cal.yaml").exists() and load_gpu(str(tmp_path / "cal.yaml"))
    assert "on 1 measured trial(s) of study 'e2e' (trials 0)" in out.stdout
    assert "1 trial(s) fix little" in out.stdout
    assert "in-sample, 1 trial" in out.stdout and "held out" not in out.stdout
    for number in (1, 2, 3, 4):
        assert f"left out: trial {number}, stopped early" in out.stdout
