"""The request rate `tuner init` writes keeps vLLM's defaults within the study's SLO: `init`
with no `--rate`, then `check`, `run` on the simulated engine and `best` gives a feasible best.
(Before, init sent 60 % of the rate the defaults sustain with every request sent at once: a
baseline far over the SLO, no trial feasible, and `best` had nothing to offer.)

`tuner run` runs in this process on the simulation core (`tuner_testing.inprocess`): the SLO
is judged on the simulated figures alone, without the box's lag that `tuner sim serve` in
scaled real time adds to them (it once read a baseline over 600 ms at 4x under load)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tuner_testing.cli import REPO, tuner
from tuner_testing.inprocess import tuner_in_process

pytestmark = pytest.mark.slow  # a whole study: `make test`, not `make test-fast`

MODEL = "deepseek-r1-distill-qwen-32b"


def test_default_rate_gives_a_feasible_best(tmp_path: Path) -> None:
    # 16 prompts sent at 60 % of what the defaults sustain (0.57 req/s) give a SIMULATED
    # P99 TTFT of 671 ms: over this SLO, so the old rule left no trial feasible
    study = tmp_path / "study.yaml"
    made = tuner(
        "init", "--no-preview", "--model", MODEL, "--gpu", "a6000", "--count", "4", "--hours", "1",
        "--num-prompts", "16", "--slo", "p99_ttft_ms<=600", "-o", str(study), cwd=REPO,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    data = yaml.safe_load(study.read_text())
    rate = data["workload"]["request_rate"]
    assert 0 < rate < 0.57
    assert f"at {rate:g} req/s (the highest round rate at which vLLM's defaults" in made.stdout
    assert "SIMULATED: p99 TTFT" in made.stdout and "within 80%" in made.stdout
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    checked = tuner("check", "--no-preview", str(study), "--storage", db, cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    ran = tuner_in_process(
        "run", str(study), "--n-trials", "1", "--storage", db, "--log-dir",
        str(tmp_path / "runs"), cwd=tmp_path,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.starts == ["trial-0000"]  # the baseline, measured
    best = tuner("best", str(study), "--storage", db, cwd=tmp_path)
    assert best.returncode == 0, best.stderr
    assert "no complete feasible trial" not in best.stdout + best.stderr
    assert "vllm serve deepseek-ai/DeepSeek-R1-Distill-Qwen-32B" in best.stdout
    trials = tuner("trials", str(study), "--storage", db, "--format", "json", cwd=tmp_path)
    baseline = next(t for t in yaml.safe_load(trials.stdout) if t["number"] == 0)
    assert baseline["p99_ttft_ms"] <= 600, baseline
    # the SLO tightened in the file: `tuner check` says the run will re-score, not re-measure
    study.write_text(study.read_text().replace("p99_ttft_ms<=600", "p99_ttft_ms<=550"))
    checked = tuner("check", "--no-preview", str(study), "--storage", db, cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith(f"note: {study} changes how trials are judged (objective.slo:")
    assert "none is measured again" in checked.stdout.splitlines()[0]
