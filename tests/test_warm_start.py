"""Warm starts (`tuner.fidelity.warm_start`): `tuner run --from-plan K` and
`--warm-start STUDY K`. The commands run in this process, the engine the simulation core
(`tuner_testing.inprocess`: measured trials, as on `tuner sim serve`, without its processes)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tuner import trial as tr
from tuner.fidelity.warm_start import fits
from tuner.spec.study import load_study_spec
from tuner_testing import sim_study
from tuner_testing.inprocess import tuner_in_process as tuner

pytestmark = pytest.mark.slow  # whole studies: `make test`, not `make test-fast`


def _trials(tmp_path: Path, name: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path}/tuner.db").trials


def test_from_plan_runs_the_plans_top_configs_first(tmp_path: Path, tiny_model_dir) -> None:
    study = sim_study(tmp_path, tiny_model_dir)
    plan = tuner("plan", str(study), "--n-trials", "8", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    ranked = tr.ranked(tr.read_all(_trials(tmp_path, "e2e-simulated")))
    planned = [p for p in ranked if not p.baseline][:2]  # the baseline runs first anyway
    run = tuner("run", str(study), "--from-plan", "2", "--n-trials", "3", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    real = _trials(tmp_path, "e2e")
    assert real[0].user_attrs[tr.BASELINE]
    assert [t.params for t in real[1:3]] == [p.params for p in planned]
    assert real[1].user_attrs[tr.WARM_START] == f"e2e-simulated trial {planned[0].number}"
    # measured for real: its own figures, not the plan's predictions copied in
    assert real[1].user_attrs["vllm_version"].startswith("sim-")

    other = sim_study(tmp_path, tiny_model_dir, name="after-upgrade")
    warm = tuner("run", str(other), "--warm-start", "e2e", "1", "--n-trials", "2", cwd=tmp_path)
    assert warm.returncode == 0, warm.stderr
    best_of_e2e = next(
        p for p in tr.ranked(tr.read_all(_trials(tmp_path, "e2e"))) if not p.baseline
    )
    assert _trials(tmp_path, "after-upgrade")[1].params == best_of_e2e.params


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--from-plan", "3"], "--from-plan: no plan study 'e2e-simulated'"),
        (["--warm-start", "nobody", "2"], "--warm-start: no study named 'nobody'"),
        (["--warm-start", "e2e", "0"], "--warm-start: K must be at least 1"),
    ],
)
def test_warm_start_without_a_source_is_one_line_exit_2(
    tmp_path: Path, tiny_model_dir, args: list[str], needle: str
) -> None:
    study = sim_study(tmp_path, tiny_model_dir)
    run = tuner("run", str(study), *args, cwd=tmp_path)
    assert run.returncode == 2
    assert needle in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert "Traceback" not in run.stderr


def test_a_config_outside_the_space_does_not_fit(tmp_path: Path, tiny_model_dir) -> None:
    spec = load_study_spec(sim_study(tmp_path, tiny_model_dir))
    ok = {"max-num-seqs": 16, "max-num-batched-tokens": 1024, "gpu-memory-utilization": 0.8}
    assert fits(spec, ok)
    assert not fits(spec, {**ok, "max-num-seqs": 1024})  # out of range
    assert not fits(spec, {**ok, "block-size": 16})  # a parameter this space lacks
    assert not fits(spec, {k: v for k, v in ok.items() if k != "max-num-seqs"})
