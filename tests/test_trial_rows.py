"""A trial row never contradicts itself (issues 21 §3 and 24), in `tuner trials`' table, CSV
and JSON: a stopped trial's figures are marked partial (they cover only the requests done
when it was stopped), and a config refused before launch on a prediction is not COMPLETE."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from tuner.spec.figures import figure
from tuner_testing import sim_study, tuner

pytestmark = pytest.mark.slow  # whole studies: `make test`, not `make test-fast`

# max-num-seqs 1 queues 32 prompts (stopped early on the TTFT SLO); 0.3 of an A6000 leaves
# the 32B model no KV cache (refused on the precheck's prediction, never launched).
SPACE = {
    "max-num-seqs": {"type": "categorical", "choices": [256, 1], "default": 256},
    "gpu-memory-utilization": {"type": "categorical", "choices": [0.9, 0.3], "default": 0.9},
}


def test_stopped_trials_are_partial_and_predicted_refusals_are_not_complete(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    study = sim_study(
        tmp_path,
        tiny_model_dir,
        search_space={"parameters": SPACE},
        workload={"num_prompts": 32},
        objective={"slo": ["p99_ttft_ms<=1000"]},
        pruning={"check_every_requests": 2},
        sampler={"name": "random", "seed": 0},
    )
    # stopped early, not ruled out before launch (tests/test_predict_skip.py)
    plan = tuner("plan", str(study), "--n-trials", "3", "--no-prediction-skip", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr

    def trials(fmt: str) -> str:
        out = tuner("trials", str(study), "--simulated", "--format", fmt, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        return out.stdout

    rows = json.loads(trials("json"))
    stopped = [r for r in rows if r["state"] == "PRUNED"]
    refused = [r for r in rows if r["param_gpu-memory-utilization"] == 0.3]
    assert stopped and refused, rows  # the seed gives both: else the test proves nothing
    assert all(r["partial"] is True for r in stopped)
    assert all(r["partial"] is False for r in rows if r["state"] != "PRUNED")
    # a stopped trial's TTFT may read under the SLO it was stopped for breaking
    assert all(r["failure"].startswith("stopped early: SLO p99_ttft_ms<=1000") for r in stopped)
    assert all(r["state"] == "REFUSED (predicted)" and r["engine_s"] == 0 for r in refused)
    assert all(r["p99_ttft_ms"] is None for r in refused)

    table = list(csv.DictReader(io.StringIO(trials("csv"))))
    assert [(r["state"], r["partial"]) for r in table] == [
        (r["state"], str(r["partial"])) for r in rows
    ]
    text = tuner("trials", str(study), "--simulated", cwd=tmp_path).stdout
    ttft = stopped[0]["p99_ttft_ms"]
    assert f"~{figure(ttft)}" in text and "~: partial, the trial was stopped early" in text
    assert "REFUSED (predicted)" in " ".join(text.split())  # in the legend at 80 columns
    assert f" {figure(rows[0]['p99_ttft_ms'])}" in text  # a full run's figure, unmarked
    # ... and the live line of the run marks them the same way (`spec.figures.partial_figure`)
    live = " ".join(plan.stderr.split())
    for r in stopped:
        shown = f"p99 TTFT ~{figure(r['p99_ttft_ms'], 1)} ms, mean TPOT ~"
        assert f"trial {r['number']}: stopped early after " in live, live
        assert shown in live.split(f"trial {r['number']}: stopped early", 1)[1], live
