"""A shape study on the simulated engine, end to end (issue 23 §3): TP=1 refused before launch
(its weights do not fit an A6000), TP=4 and two replicas of TP=2 measured, the report and
`tuner best` comparing the shapes, and the exported flags starting the simulated engine with
the very shape that was measured."""

from __future__ import annotations

import shlex
from pathlib import Path

import httpx
import optuna
import pytest
import sqlalchemy as sa
from test_sim_server import sim_server

from tuner.store.schema import trials_table
from tuner_testing import sim_study, tuner

pytestmark = pytest.mark.slow  # a whole study: `make test`, not `make test-fast`

SHAPE_SPACE = {
    "parameters": {
        "tensor-parallel-size": {"type": "categorical", "choices": [1, 2, 4], "default": 4},
        "enable-prefix-caching": {"type": "bool", "default": True},
    },
    "fill_data_parallel": True,
}


@pytest.fixture(scope="module")
def shape_study(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp_path = tmp_path_factory.mktemp("shape")
    study = sim_study(
        tmp_path,
        tiny_model_dir,
        flags={"tensor-parallel-size": None},  # the shape is searched
        workload={"num_prompts": 8, "request_rate": 8},
        search_space=SHAPE_SPACE,
        sampler={"name": "random", "seed": 3},
        budget={"n_trials": 7},
    )
    run = tuner("run", str(study), cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stderr
    return study


def _trials(study: Path) -> list[optuna.trial.FrozenTrial]:
    url = f"sqlite:///{study.parent}/tuner.db"
    return optuna.load_study(study_name="e2e", storage=url).trials


def test_shapes_are_refused_measured_and_compared(shape_study: Path) -> None:
    trials = _trials(shape_study)
    by_tp = {}
    for t in trials:
        by_tp.setdefault(t.params["tensor-parallel-size"], []).append(t)
    assert set(by_tp) == {1, 2, 4}, [t.params for t in trials]
    # TP=1: refused before launch, the reason on the trial; no engine started
    for t in by_tp[1]:
        assert t.user_attrs["predicted"] is True and "engine_s" in t.user_attrs
        assert (
            "weights take 61.03 GiB per GPU at tensor-parallel-size 1"
            in (t.user_attrs["failure_reason"])
        )
    measured = [t for t in by_tp[2] if t.state == optuna.trial.TrialState.COMPLETE]
    assert measured
    engine = sa.create_engine(f"sqlite:///{shape_study.parent}/tuner.db")
    with engine.connect() as conn:
        rows = conn.execute(sa.select(trials_table.c.trial_number, trials_table.c.argv)).all()
    argv = {number: a for number, a in rows if a}
    launched = [t for t in measured if t.number in argv]  # not a reused result
    assert launched
    for t in launched:  # the engine was told the derived shape
        cmd = argv[t.number]
        assert cmd[cmd.index("--data-parallel-size") + 1] == "2"
    best = tuner("best", str(shape_study), cwd=shape_study.parent)
    assert best.returncode == 0, best.stderr
    text = " ".join(best.stdout.replace("#", " ").split())  # as wrapped to the terminal
    assert "deployment shapes tried (replicas x TP)" in text
    for shape in ("1 x TP=4", "2 x TP=2", "4 x TP=1"):
        assert shape in text, best.stdout
    refused = (
        "4 x TP=1, prefix caching on: 3 trial(s): 0 feasible, 0 infeasible, "
        "3 refused before launch (never launched), 0 failed"
    )
    assert f"{refused}: out_of_memory: torch.OutOfMemoryError" in text
    out = shape_study.parent / "report.html"
    rep = tuner("report", str(shape_study), "-o", str(out), cwd=shape_study.parent)
    assert rep.returncode == 0, rep.stderr
    assert "Deployment shapes" in out.read_text() and "2 x TP=2" in out.read_text()


def test_exported_flags_start_the_simulated_engine_with_that_shape(
    shape_study: Path, tmp_path: Path
) -> None:
    trial = next(
        t.number
        for t in _trials(shape_study)
        if t.params["tensor-parallel-size"] == 2 and t.state == optuna.trial.TrialState.COMPLETE
    )
    cwd = shape_study.parent
    export = tuner("export", str(shape_study), "--trial", str(trial), cwd=cwd)
    assert export.returncode == 0, export.stderr
    command = export.stdout[export.stdout.index("vllm serve") :].replace("\\\n", " ")
    argv = shlex.split(command)[3:]  # after `vllm serve MODEL`
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert argv[argv.index("--data-parallel-size") + 1] == "2"
    assert "--enable-prefix-caching" in argv or "--no-enable-prefix-caching" in argv
    log = tmp_path / "sim.log"
    model = ["--model", "deepseek-r1-distill-qwen-32b", "--gpu", "a6000"]
    with sim_server(*model, *argv, log=log) as sim:
        metrics = httpx.get(f"{sim.url}/metrics", timeout=5).text
    assert "deployment shape: data_parallel_size=2 x tensor_parallel_size=2" in log.read_text()
    assert 'vllm:num_requests_running{engine="1"' in metrics  # a second replica
    # the same shape on a slot of 2 GPUs is refused as vLLM refuses it
    with sim_server(*model, *argv, ready=False, env={"CUDA_VISIBLE_DEVICES": "0,1"}) as sim:
        assert sim.proc.wait(timeout=30) == 1
        assert "larger than the number of available GPUs (2)" in sim.proc.stderr.read()
