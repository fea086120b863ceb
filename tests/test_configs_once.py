"""Each config once (issues 21 §3 and 24): a reused result is a copy, not a measurement, and
`--confirm`'s re-runs are repeats of a config, not configs; `tuner pareto` shows each config
in one row. `tuner best` never names a copy (tests/test_trials.py); the re-runs pooled into
a row after a real `--confirm`: tests/test_confirm_results.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tuner_testing import sim_study, tuner

pytestmark = pytest.mark.slow  # whole studies: `make test`, not `make test-fast`

TWO_CONFIGS = {
    "parameters": {"max-num-seqs": {"type": "categorical", "choices": [8, 256], "default": 256}}
}


def test_pareto_shows_each_config_once_not_its_reused_copies(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    # Two configs: with this seed the sampler proposes the baseline's config again (trial 1,
    # a reused result) before the other one.
    study = sim_study(
        tmp_path,
        tiny_model_dir,
        search_space=TWO_CONFIGS,
        workload={"num_prompts": 4, "random_output_len": 4},
        sampler={"name": "random", "seed": 0},
    )
    plan = tuner("plan", str(study), "--n-trials", "2", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    copies = {int(n) for n in re.findall(r"trial (\d+): same parameters as", plan.stderr)}
    assert copies, "no reused result: the test proves nothing"

    front = tuner("pareto", str(study), "--simulated", "--format", "json", cwd=tmp_path)
    assert front.returncode == 0, front.stderr
    shown = json.loads(front.stdout)
    assert not {r["trial"] for r in shown} & copies
    assert len({r["params"]["max-num-seqs"] for r in shown}) == len(shown) <= 2
    assert all(r["runs"] == 1 and r["pooled_trials"] == [r["trial"]] for r in shown)
    table = tuner("pareto", str(study), "--simulated", cwd=tmp_path)
    assert f"{len(shown)} of 2 feasible configs" in " ".join(table.stdout.split())
