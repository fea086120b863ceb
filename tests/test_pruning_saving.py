"""Stop only when it pays: `tuner plan` never stops a trial in the last `pruning.min_saving`
(20 %) of its run; such a trial runs to the end and is scored."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tuner.trial import read_all
from tuner_testing import sim_study, tuner

pytestmark = pytest.mark.slow  # whole studies: `make test`, not `make test-fast`

# About 3.5 × what the baseline serves: every config queues, and the TTFT SLO is broken at
# every point of the run, from the first seconds to the last fifth.
BURST = {"random_input_len": 512, "random_output_len": 64, "request_rate": 24, "num_prompts": 60}
SPACE = {
    "parameters": {
        "max-num-seqs": {"type": "int", "low": 2, "high": 256, "log": True, "default": 256},
        "max-num-batched-tokens": {
            "type": "int",
            "low": 256,
            "high": 16384,
            "log": True,
            "default": 2048,
        },
    }
}


def _stops(tmp_path: Path, tiny_model_dir: Path, min_saving: float) -> list[float]:
    """Each stopped trial's stop, as a share of its full run's workload time."""
    folder = tmp_path / str(min_saving)
    folder.mkdir()
    study = sim_study(
        folder,
        tiny_model_dir,
        workload=BURST,
        search_space=SPACE,
        objective={"slo": ["p99_ttft_ms<=4000"]},
        pruning={"min_saving": min_saving, "check_every_requests": 1},
        sampler={"name": "tpe", "seed": 0},
    )
    run = tuner("plan", str(study), "--n-trials", "14", "--no-prediction-skip", cwd=folder)
    assert run.returncode == 0, run.stderr
    stored = optuna.load_study(study_name="e2e-simulated", storage=f"sqlite:///{folder}/tuner.db")
    shares = []
    for p in read_all(stored.trials):
        r = p.record
        if p.status == "pruned" and r.reused_from is None:
            full_workload_s = r.engine_full_s - r.startup_s  # `tuner plan` knows the whole run
            shares.append(r.pruned_at_s / full_workload_s)
    return sorted(shares)


def test_no_trial_is_stopped_in_the_last_fifth_of_its_run(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    # Without the rule (min_saving 0) this study stops two trials at 80 % and 81 % of their
    # run, all its requests in one batch, each about a second before its end.
    shares = _stops(tmp_path, tiny_model_dir, 0.2)
    assert len(shares) >= 5 and max(shares) <= 0.8, shares
    assert any(s > 0.5 for s in shares), shares  # so the stricter rule below has work to do
    strict = _stops(tmp_path, tiny_model_dir, 0.5)
    assert strict and max(strict) <= 0.5, strict
    assert len(strict) < len(shares)  # the late ones ran to the end instead
