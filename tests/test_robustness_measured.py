"""The robustness check measured on the engine (`tuner run --confirm`): real `tuner sim serve`
processes, real HTTP on loopback, real SQLite."""

from __future__ import annotations

import math
import signal
from pathlib import Path

import optuna
import pytest

from tuner import trial as tr
from tuner.fidelity import robustness as rb
from tuner.fidelity import robustness_measured as rm
from tuner.runners.engine_runner import EngineRunner
from tuner.spec.study import load_study_spec
from tuner.trial import TrialPoint
from tuner_testing import sim_study, start_run
from tuner_testing.inprocess import tuner_in_process
from tuner_testing.waiting import requests_served, wait_for

pytestmark = pytest.mark.slow  # whole studies: `make test`, not `make test-fast`

BASE = {"max-num-seqs": 256, "max-num-batched-tokens": 2048, "gpu-memory-utilization": 0.9}
# The demo's kind of load, smaller: ~2k-token prompts near the box's prefill capacity, where
# vLLM's default chunk budget stalls the decodes in flight and 1024 tokens cuts TPOT.
LOADED = {
    "random_input_len": 2048,
    "random_output_len": 32,
    "random_range_ratio": 0.2,
    "num_prompts": 16,
    "request_rate": 2.2,
}


def test_run_names_are_scenario_names():
    names = [rm.run_name(p) for p in (rb.NOMINAL, *rb.PERTURBATIONS)]
    assert names == [
        "nominal",
        "prompts_minus_3pct",
        "prompts_plus_3pct",
        "rate_minus_10pct",
        "rate_plus_10pct",
    ]


def test_the_perturbations_run_on_two_engine_starts(tmp_path: Path, tiny_model_dir):
    spec = load_study_spec(sim_study(tmp_path, tiny_model_dir, workload=LOADED))
    runner = EngineRunner(spec, tmp_path / "logs", f"sqlite:///{tmp_path}/t.db")
    mine = {**BASE, "max-num-batched-tokens": 1024, "max-num-seqs": 64}
    gains, runs, failure = rm.measured_gains(spec, runner, mine, BASE)
    assert failure is None
    assert list(gains) == ["nominal", *(p.name for p in rb.PERTURBATIONS)]
    assert all(g is not None and math.isfinite(g) for g in gains.values())
    # each run is the perturbed workload, measured: lengths ±3 %, and a rate 10 % lower
    # stretches the run (same requests, later arrivals)
    base = {name: r["baseline"] for name, r in runs.items()}
    tokens = base["nominal"]["total_input_tokens"]
    assert base["prompts +3%"]["total_input_tokens"] == pytest.approx(tokens * 1.03, rel=0.005)
    assert base["prompts -3%"]["total_input_tokens"] == pytest.approx(tokens * 0.97, rel=0.005)
    assert base["rate -10%"]["total_input_tokens"] == tokens
    assert base["rate -10%"]["duration"] > base["rate +10%"]["duration"]
    assert all(r["config"]["completed"] == LOADED["num_prompts"] for r in runs.values())
    # every run measured cold: the perturbed prompts begin like the nominal ones, and the
    # engine's cache is emptied before each run (before, they found the nominal's cached)
    hits = [r[who]["prefix_cache_hit_rate"] for r in runs.values() for who in r]
    assert len(hits) == 10 and max(hits) < 0.05, hits
    # the budget near 1024 tokens wins on this load, as the simulated check says it should
    assert gains["nominal"] > 0.05
    # two engine starts: one for the config, one for the baseline
    logs = [p for p in (tmp_path / "logs").rglob("*") if p.is_file()]
    assert len(logs) == 2, logs


def test_a_failed_engine_is_not_checked(tmp_path: Path, tiny_model_dir):
    spec = load_study_spec(sim_study(tmp_path, tiny_model_dir, workload=LOADED))
    runner = EngineRunner(spec, tmp_path / "logs", f"sqlite:///{tmp_path}/t.db")
    # 20 % of a 48 GB A6000 does not hold a quarter of a 32B model's weights: the simulated
    # engine refuses to start, as vLLM does when no memory is left for the KV cache
    refused = {**BASE, "gpu-memory-utilization": 0.2}
    points = [
        TrialPoint(0, "COMPLETE", BASE, {"p99_ttft_ms": 2.0}, "feasible", score=0.0, baseline=True),
        TrialPoint(1, "COMPLETE", refused, {"p99_ttft_ms": 1.0}, "feasible", score=-0.1),
    ]

    class Study:  # what the check writes to: the study's user attrs
        def __init__(self) -> None:
            self.user_attrs: dict = {}

        def set_user_attr(self, key: str, value: object) -> None:
            self.user_attrs[key] = value

    study = Study()
    record = rm.check_best_measured(study, spec, points, runner)
    assert record is not None and record.fragile is None
    assert record.verdict.startswith("not checked on the engine: the config failed")
    assert study.user_attrs == {f"{tr.ROBUSTNESS_MEASURED}1": record.encode()}


def test_the_measured_verdict_wins_over_the_simulated_one():
    point = TrialPoint(3, "COMPLETE", BASE, {}, "feasible", spec_id="s1")
    simulated = {"spec_id": "s1", "verdict": "robust (SIMULATED)"}  # as stored
    measured = {"spec_id": "s1", "verdict": "FRAGILE (measured on the engine)", "runs": {}}

    def shown(attrs: dict) -> str | None:
        found = tr.StudyRecord.decode(attrs).robustness_of(point)
        return found.verdict if found is not None else None

    assert shown({f"{tr.ROBUSTNESS}3": simulated}) == simulated["verdict"]
    both = {f"{tr.ROBUSTNESS}3": simulated, f"{tr.ROBUSTNESS_MEASURED}3": measured}
    assert shown(both) == measured["verdict"]
    stale = {**both, f"{tr.ROBUSTNESS_MEASURED}3": {**measured, "spec_id": "old"}}
    assert shown(stale) == simulated["verdict"]  # measured under another spec


def test_run_confirm_measures_the_check_and_best_prints_it(tmp_path: Path, tiny_model_dir):
    """`--confirm`'s measured checks and what `best` prints of them: the logic of the run and
    of the results, so its engine is the simulation core in this process
    (`tuner_testing.inprocess`); the perturbations on `tuner sim serve`'s engine starts and a
    signal during the check are the two tests around this one."""
    study = sim_study(
        tmp_path,
        tiny_model_dir,
        workload=LOADED,
        search={"fidelity": "multi", "candidates": 32},
        budget={"n_trials": 3},
        trial={"stall_timeout_s": 20, "confirm_repeats": 1},
    )
    run = tuner_in_process("run", str(study), "--confirm", "1", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "re-measuring trial" in run.stderr
    s = optuna.load_study(study_name="e2e", storage=f"sqlite:///{tmp_path}/tuner.db")
    best = tuner_in_process("best", str(study), cwd=tmp_path)
    assert best.returncode == 0, best.stderr
    number = int(best.stdout.split("# best trial ")[1].split()[0])
    assert not s.trials[number].user_attrs.get(tr.BASELINE)  # the screen's configs beat it
    record = s.user_attrs[f"{tr.ROBUSTNESS_MEASURED}{number}"]
    assert set(record["gains"]) == {p.name for p in rb.PERTURBATIONS}
    assert set(record["runs"]) == {"nominal", *(p.name for p in rb.PERTURBATIONS)}
    assert f"# {record['verdict']}" in best.stdout
    assert "measured on the engine" in best.stdout
    assert f"{tr.ROBUSTNESS}{number}" in s.user_attrs  # the simulated check is kept too
    # two engine starts for the check: the config's and the baseline's
    checks = [name for name in run.starts if name.startswith(f"robustness-{number:04d}-")]
    assert sorted(checks) == [f"robustness-{number:04d}-{who}" for who in ("baseline", "config")]
    # the same run re-measured the flags the simulator dropped from the best config, on the
    # engine (a simulated one: SIMULATED figures), one start each (tests/test_smallest_change)
    study_record = tr.StudyRecord.of(s)
    predicted = study_record.smallest[number]
    dropped = [r.flag for r in predicted.dropped]
    assert predicted.checked and dropped, predicted
    measured = study_record.smallest_measured[number]
    assert measured.engine and measured.source == "SIMULATED" and measured.checked
    assert [r.flag for r in measured.reverts] == dropped
    assert "with the flags the simulator dropped reverted" in run.stderr
    starts = [name for name in run.starts if name == f"smallest-{number:04d}"]
    assert 1 <= len(starts) <= len(dropped) + 2, run.starts


def _check_logs(tmp_path: Path, who: str) -> list[Path]:
    return sorted((tmp_path / "runs").rglob(f"robustness-*-{who}-*.log"))


def _answers(log: Path) -> bool:
    """Whether the engine that wrote `log` still answers on its port."""
    import httpx

    from tuner_testing.waiting import engine_url

    try:
        httpx.get(f"{engine_url(log)}/metrics", timeout=2.0)
    except httpx.HTTPError:
        return False
    return True


def test_a_signal_during_the_measured_check_stops_it_and_a_later_run_redoes_it(
    tmp_path: Path, tiny_model_dir
):
    """SIGTERM (`timeout`, systemd) as during a trial (SIGINT and SIGHUP take the same
    handler, `tuner.run.signals`): the engine stopped, one line, the check recorded as not
    finished, 128 + the signal; the next run redoes it.

    The process is the behaviour only where the signal lands: the study's two trials are
    measured in this process (`tuner_testing.inprocess`), then `tuner run --confirm` on
    `tuner sim serve` (no trial left in the budget: it goes to the confirmation and the check)
    is signalled while the check's engine serves; the later run that redoes the check is the
    loop's logic, in this process again."""
    signum = signal.SIGTERM
    # two configs: vLLM's default chunk budget and 1024, which wins on this load (above)
    space = {"max-num-batched-tokens": {"type": "categorical", "choices": [2048, 1024],
                                        "default": 2048}}  # fmt: skip
    study = sim_study(
        tmp_path,
        tiny_model_dir,
        workload=LOADED,
        search_space={"parameters": space},
        budget={"n_trials": 2},
        trial={"stall_timeout_s": 20, "confirm_repeats": 1},
    )
    trials = tuner_in_process("run", str(study), cwd=tmp_path)
    assert trials.returncode == 0, trials.stderr
    proc = start_run(study, tmp_path, "--confirm", "1")
    # the check's first engine (the best config's) is up and serving its workload
    logs = wait_for(
        lambda: [log for log in _check_logs(tmp_path, "config") if requests_served(log) >= 1],
        "the measured check's engine serving",
        240,
        proc=proc,
    )
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, err
    lines = [line for line in err.splitlines() if line.startswith("tuner: error:")]
    assert len(lines) == 1, err
    assert f"interrupted by {signum.name} during the measured robustness check of trial" in err
    assert not _answers(logs[0])  # its engine was stopped before the tuner exited
    assert not list((tmp_path / "runs").rglob("trial--*"))  # named apart, not trial -1

    s = optuna.load_study(study_name="e2e", storage=f"sqlite:///{tmp_path}/tuner.db")
    number = int(lines[0].split("robustness check of trial ")[1].split(":")[0])
    record = tr.StudyRecord.of(s).robustness_measured[number]
    assert not record.finished and f"interrupted by {signum.name}" in record.verdict
    best = tuner_in_process("best", str(study), cwd=tmp_path)
    assert f"the check was interrupted by {signum.name}" in best.stdout

    # a later run, without --confirm, knows the check did not finish and redoes it
    again = tuner_in_process("run", str(study), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert f"re-measuring trial {number} and the baseline" in again.stderr
    s = optuna.load_study(study_name="e2e", storage=f"sqlite:///{tmp_path}/tuner.db")
    record = tr.StudyRecord.of(s).robustness_measured[number]
    assert record.finished and set(record.runs) == {"nominal", *(p.name for p in rb.PERTURBATIONS)}
    # the interrupted check's one engine (the config's), then the redo's two
    assert len(_check_logs(tmp_path, "config")) == 1 and not _check_logs(tmp_path, "baseline")
    checks = [name for name in again.starts if name.startswith("robustness-")]
    assert sorted(checks) == [f"robustness-{number:04d}-{who}" for who in ("baseline", "config")]
    assert all(f"robustness-{number:04d}-" in log.name for log in _check_logs(tmp_path, "*"))
