"""The trial loop on the planner runner (the simulator in virtual time) and a real SQLite file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from tuner.errors import UserError
from tuner.run.loop import StudyLoop
from tuner.run.recovery import this_process
from tuner.runners.plan import PlanRunner
from tuner.spec.study import StudySpec
from tuner.store.optuna_adapter import set_system_attr
from tuner.store.storage import Store
from tuner.trial import OWNER
from tuner.trial.specs import study_name
from tuner_testing import request_records, trial_row

pytestmark = pytest.mark.slow  # whole studies: `make test`, not `make test-fast`


def _spec(tokenizer: Path, **over) -> StudySpec:
    data = {
        "name": "loop",
        "engine": {
            "command": ["{python}", "-m", "tuner.cli", "sim", "serve", "--model", "{model}"],
            "model": "deepseek-r1-distill-qwen-32b",
            "flags": {"tensor-parallel-size": 4, "max-model-len": 512, "gpu": "a6000"},
        },
        "hardware": {"gpu": "a6000", "count": 4},
        "search_space": {
            "parameters": {
                "max-num-seqs": {"type": "int", "low": 4, "high": 256, "log": True, "default": 256},
                "max-num-batched-tokens": {
                    "type": "int",
                    "low": 512,  # vLLM's rules take every config (they are free, issue 34)
                    "high": 16384,
                    "log": True,
                    "default": 2048,
                },
                "gpu-memory-utilization": {
                    "type": "float",
                    "low": 0.3,
                    "high": 0.95,
                    "step": 0.05,
                    "default": 0.9,
                },
                "enable-chunked-prefill": {"type": "bool", "default": True},
            }
        },
        "workload": {
            "tokenizer": str(tokenizer),
            "random_input_len": 256,
            "random_output_len": 32,
            "num_prompts": 40,
            "request_rate": 8,
        },
        "budget": {"n_trials": 5},
    }
    data.update(over)
    return StudySpec.model_validate(data)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(f"sqlite:///{tmp_path}/t.db")
    yield s
    s.close()


def _loop(spec: StudySpec, store: Store) -> StudyLoop:
    return StudyLoop(spec, store, PlanRunner(spec))


def test_plan_study_stores_every_trial_with_metrics(tiny_model_dir: Path, store: Store) -> None:
    spec = _spec(tiny_model_dir)
    summary = _loop(spec, store).run(n_trials=3)
    assert summary.ran == 3
    study = store.load_study(study_name(spec, planned=True))
    assert study.study_name == "loop-simulated"
    trials = study.get_trials()
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 3
    base = trials[0]
    assert base.user_attrs["baseline"] is True
    assert base.params["max-num-seqs"] == 256
    assert base.user_attrs["score"] == 0.0
    assert base.user_attrs["simulated"] is True
    for t in trials:
        if "failure_kind" in t.user_attrs:
            continue
        for key in ("p99_ttft_ms", "mean_tpot_ms", "output_throughput", "p99_ttft_ms_ci"):
            assert key in t.user_attrs
        assert trial_row(store, study.study_name, t.number)["outcome"] == "measured"
        assert len(request_records(store, study.study_name, t.number)) == 40
    assert study.metric_names == ["score"]


def test_rerun_continues_toward_the_budget(tiny_model_dir: Path, store: Store) -> None:
    spec = _spec(tiny_model_dir)
    _loop(spec, store).run(n_trials=2)
    summary = _loop(spec, store).run()  # no --n-trials: finish the study file's budget of 5
    assert summary.ran == 3
    assert len(store.load_study("loop-simulated").trials) == 5
    assert _loop(spec, store).run().ran == 0


def test_refused_configs_are_recorded_not_launched(tiny_model_dir: Path, store: Store) -> None:
    spec = _spec(tiny_model_dir)
    loop = _loop(spec, store)
    loop.study.enqueue_trial(
        {
            "max-num-seqs": 256,
            "max-num-batched-tokens": 100,
            "gpu-memory-utilization": 0.9,
            "enable-chunked-prefill": True,
        }
    )
    loop.study.enqueue_trial(
        {
            "max-num-seqs": 8,
            "max-num-batched-tokens": 2048,
            "gpu-memory-utilization": 0.3,
            "enable-chunked-prefill": True,
        }
    )
    summary = loop.run(n_trials=1)  # a rule's refusal is free: the memory refusal is the 1
    assert (
        summary.saved_by_precheck + summary.saved_by_reuse == 1
        and summary.saved_by_rules == 1
        and summary.ran == 2
    )
    rule, memory, baseline = loop.study.get_trials()
    assert baseline.state == optuna.trial.TrialState.WAITING  # vLLM's defaults: queued next
    assert rule.user_attrs["failure_kind"] == "invalid_argument"
    assert (
        "must be greater than or equal to max_num_seqs (256)." in rule.user_attrs["failure_reason"]
    )
    assert memory.user_attrs["failure_kind"] == "kv_cache_too_small"
    for t in (rule, memory):
        assert t.state == optuna.trial.TrialState.COMPLETE
        assert t.constraints["measured"] == 1.0
        assert t.system_attrs["constraints"][0] == 1.0  # what optuna-dashboard reads
        assert t.user_attrs["predicted"] is True


def test_repeated_parameters_reuse_the_result(tiny_model_dir: Path, store: Store) -> None:
    spec = _spec(tiny_model_dir)
    loop = _loop(spec, store)
    params = {
        "max-num-seqs": 32,
        "max-num-batched-tokens": 4096,
        "gpu-memory-utilization": 0.9,
        "enable-chunked-prefill": True,
    }
    loop.study.enqueue_trial(params)
    loop.study.enqueue_trial(params)
    summary = loop.run(n_trials=2)  # a reused result is not a new trial: the baseline runs too
    first, second, baseline = loop.study.get_trials()
    assert summary.new_configs == 2 and summary.saved_by_reuse == 1
    assert baseline.user_attrs["baseline"] is True
    assert second.user_attrs["reused_from"] == first.number
    assert second.values == first.values
    assert trial_row(store, "loop-simulated", second.number) is None


def test_stale_running_trial_is_marked_interrupted(tiny_model_dir: Path, store: Store) -> None:
    spec = _spec(tiny_model_dir)
    loop = _loop(spec, store)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    owner = {**this_process(), "pid": int(dead.stdout), "start_ticks": 1}
    stale = loop.study.ask()
    set_system_attr(loop.study, stale, OWNER, owner)
    alive = loop.study.ask()
    set_system_attr(loop.study, alive, OWNER, this_process())

    _loop(spec, store).recover()
    states = {t.number: t for t in loop.study.get_trials()}
    assert states[stale.number].state == optuna.trial.TrialState.FAIL
    assert states[stale.number].user_attrs["failure_kind"] == "interrupted"
    assert states[alive.number].state == optuna.trial.TrialState.RUNNING
    assert os.getpid() == this_process()["pid"]


def test_multi_objective_mode(tiny_model_dir: Path, store: Store) -> None:
    spec = _spec(tiny_model_dir, objective={"mode": "multi"})
    loop = _loop(spec, store)
    loop.run(n_trials=2)
    assert loop.study.directions == [
        optuna.study.StudyDirection.MINIMIZE,
        optuna.study.StudyDirection.MINIMIZE,
        optuna.study.StudyDirection.MAXIMIZE,
    ]
    assert loop.study.metric_names == ["p99_ttft_ms", "mean_tpot_ms", "output_throughput"]
    t = loop.study.get_trials()[0]  # the baseline: measured
    assert t.values[0] == t.user_attrs["p99_ttft_ms"]
    assert "score" in t.user_attrs


def test_confirm_re_measures_the_best(tiny_model_dir: Path, store: Store) -> None:
    from tuner.results.best import best_report
    from tuner.trial import StudyRecord, confirmation_runs, ranked, read_all

    spec = _spec(tiny_model_dir, trial={"confirm_repeats": 2})
    loop = _loop(spec, store)
    summary = loop.run(n_trials=3, confirm=1)
    assert summary.ran == 5
    trials = loop.study.get_trials()
    repeats = [t for t in trials if "confirm_of" in t.user_attrs]
    assert len(repeats) == 2
    top = repeats[0].user_attrs["confirm_of"]
    assert all("reused_from" not in t.user_attrs for t in repeats)
    points = read_all(trials)
    assert len(confirmation_runs(points)[top]) == 3
    assert all(p.confirm_of is None for p in ranked(points))
    assert "confirmed over 3 runs" in best_report(points, loop.name, StudyRecord.of(loop.study))


# Results that can be trusted (resume, baseline, doomed studies, sampler errors) -------------


def test_resuming_a_seeded_study_does_not_replay_it(tiny_model_dir: Path, store: Store) -> None:
    spec = _spec(tiny_model_dir, sampler={"name": "random", "seed": 3})
    first = _loop(spec, store).run(n_trials=4)
    again = _loop(spec, store).run(n_trials=3)
    assert first.new_configs == 4 and again.new_configs == 3 and again.saved_by_reuse == 0
    trials = store.load_study("loop-simulated").get_trials()
    assert len(trials) == 7
    keys = {tuple(sorted(t.params.items())) for t in trials}
    assert len(keys) == 7  # no proposal replayed
    # A fresh study with the same seed is reproducible.
    other = Store(f"sqlite:///{store.url.removeprefix('sqlite:///')}.2")
    _loop(spec, other).run(n_trials=4)
    assert [t.params for t in other.load_study("loop-simulated").get_trials()] == [
        t.params for t in trials[:4]
    ]
    other.close()


class _InterruptOnce(PlanRunner):
    """Ctrl-C during the first measurement, as a person would press it."""

    interrupted = False

    def measure(self, ctx):
        if not _InterruptOnce.interrupted:
            _InterruptOnce.interrupted = True
            raise KeyboardInterrupt
        return super().measure(ctx)


def test_an_interrupted_baseline_is_the_next_trial(tiny_model_dir: Path, store: Store) -> None:
    spec = _spec(tiny_model_dir)
    with pytest.raises(KeyboardInterrupt):
        StudyLoop(spec, store, _InterruptOnce(spec)).run(n_trials=2)
    loop = _loop(spec, store)
    loop.run(n_trials=2)
    first, second, third = loop.study.get_trials()
    assert first.user_attrs["failure_kind"] == "interrupted" and first.user_attrs["baseline"]
    assert second.user_attrs["baseline"] is True and second.params == first.params
    assert second.user_attrs["score"] == 0.0 and second.user_attrs["reference_trial"] == 1
    assert "baseline" not in third.user_attrs
    assert third.user_attrs.get("reference_trial", 1) == 1  # when measured (not refused)


def test_a_resumed_study_marks_one_baseline(
    tiny_model_dir: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C during trial 0, then a resumed run: `tuner trials` marks the re-run baseline
    (`1*`) alone; the interrupted trial stays recorded as it ended (docs/results.md)."""
    import io

    from rich.console import Console

    from tuner.results.views import print_trials_table, trials_frame
    from tuner.trial.reading import read_study

    monkeypatch.setattr(_InterruptOnce, "interrupted", False)  # whichever test ran first
    spec = _spec(tiny_model_dir)
    with pytest.raises(KeyboardInterrupt):
        StudyLoop(spec, store, _InterruptOnce(spec)).run(n_trials=1)
    loop = _loop(spec, store)
    loop.run(n_trials=1)
    read = read_study(loop.study)
    points = read.judged_all()
    assert [p.number for p in points if p.baseline] == [1]
    cut = points[0]
    assert cut.state == "FAIL" and cut.interrupted and cut.record.baseline  # nothing lost
    out = io.StringIO()
    print_trials_table(trials_frame(points, read.record), Console(file=out, width=200))
    marks = [line.split()[0] for line in out.getvalue().splitlines()[2:4]]
    assert marks == ["0", "1*"], out.getvalue()


class _ModelTypo(PlanRunner):
    """Every launch dies at start the same way, as with a model path typo."""

    def measure(self, ctx):
        from tuner.runners.engine_runner import Measurement

        return Measurement(
            failure_kind="crashed",
            failure_reason="engine exited (exit code 1): OSError: /models/qwen32 "
            f"(pid {ctx.number}) does not exist",
            log_path=f"/tmp/trial-{ctx.number}.log",
        )


def test_a_study_whose_engine_never_starts_stops(tiny_model_dir: Path, store: Store) -> None:
    spec = _spec(tiny_model_dir, sampler={"name": "random", "seed": 1})
    loop = StudyLoop(spec, store, _ModelTypo(spec))
    with pytest.raises(UserError, match=r"first 3 engine starts all failed .*does not exist"):
        loop.run(n_trials=10)
    trials = loop.study.get_trials()
    launched = [t for t in trials if not t.user_attrs.get("predicted")]
    assert len(launched) == 3 and len(trials) < 10  # not the whole budget
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)


def test_a_sampler_exception_leaves_no_trial_running(
    tiny_model_dir: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _spec(tiny_model_dir, sampler={"name": "random", "seed": 1})
    loop = _loop(spec, store)
    loop.run(n_trials=1)

    def broken(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'torch'")

    monkeypatch.setattr(optuna.samplers.RandomSampler, "sample_independent", broken)
    with pytest.raises(ModuleNotFoundError):
        loop.run(n_trials=1)
    last = loop.study.get_trials()[-1]
    assert last.state == optuna.trial.TrialState.FAIL
    assert last.user_attrs["failure_kind"] == "tuner_error"
    assert "torch" in last.user_attrs["failure_reason"]


def test_gp_sampler_without_its_dependencies_is_refused_at_load(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    import importlib.util

    import yaml

    if importlib.util.find_spec("torch") and importlib.util.find_spec("scipy"):
        pytest.fail("this environment has torch and scipy: the refusal cannot be checked here")
    data = _spec(tiny_model_dir, sampler={"name": "gp"}).model_dump(mode="json")
    path = tmp_path / "gp.yaml"
    path.write_text(yaml.safe_dump(data))
    run = subprocess.run(
        [sys.executable, "-m", "tuner.cli", "plan", str(path), "--n-trials", "2"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and "tuner[gp]" in run.stderr
    assert not (tmp_path / "tuner.db").exists()


def test_recovery_does_not_depend_on_the_hostname(tiny_model_dir: Path, store: Store) -> None:
    """A new container on the same boot has a new hostname: the dead owner is still dead."""
    spec = _spec(tiny_model_dir)
    loop = _loop(spec, store)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    owner = {**this_process(), "host": "last-nights-container", "pid": int(dead.stdout)}
    stale = loop.study.ask()
    set_system_attr(loop.study, stale, OWNER, owner)
    elsewhere = loop.study.ask()  # another machine (another boot): not ours to judge
    set_system_attr(loop.study, elsewhere, OWNER, {**owner, "boot_id": "another-boot"})
    _loop(spec, store).recover()
    states = {t.number: t.state for t in loop.study.get_trials()}
    assert states[stale.number] == optuna.trial.TrialState.FAIL
    assert states[elsewhere.number] == optuna.trial.TrialState.RUNNING


def test_engine_s_adds_up(tiny_model_dir: Path, store: Store) -> None:
    from tuner.sim.boot import estimated_startup_s
    from tuner.trial import ENGINE_S, STARTUP_S, WORKLOAD_S, read_all
    from tuner.trial.uptime import summary_line

    spec = _spec(tiny_model_dir, hardware={"gpu": "a6000", "count": 4, "startup_s": 50})
    summary = _loop(spec, store).run(n_trials=4)
    points = read_all(store.load_study(study_name(spec, planned=True)).get_trials())
    assert all(ENGINE_S in p.attrs for p in points)
    for p in points:
        if p.measured:  # modelled start-up + the workload's virtual seconds
            assert p.attrs[ENGINE_S] == pytest.approx(50 + p.attrs[WORKLOAD_S])
            assert p.attrs[STARTUP_S] == 50 and p.record.engine_split_s == (
                50,
                pytest.approx(p.attrs[WORKLOAD_S]),
            )
        elif p.attrs.get("predicted") or "reused_from" in p.attrs:
            assert p.attrs[ENGINE_S] == 0
    assert summary.engine_s == pytest.approx(sum(p.attrs[ENGINE_S] for p in points))
    assert summary.measured_engine_s and summary.engine_s >= 50 * len(summary.measured_engine_s)
    assert summary_line(summary).startswith(f"engine time used {summary.engine_s:.0f} s")
    launched = [p for p in points if p.record.engine_split_s is not None]
    assert summary.startup_s == pytest.approx(sum(p.record.engine_split_s[0] for p in launched))
    assert f"({summary.startup_s:.0f} s of it, " in summary_line(summary)
    # The documented default for 4×A6000 with the 32B model (an estimate): about 88 s.
    assert estimated_startup_s("deepseek-r1-distill-qwen-32b", "a6000", {}) == pytest.approx(
        88, abs=2
    )


def test_a_worker_whose_trial_a_survivor_ended_stops_in_one_line(
    tiny_model_dir: Path, store: Store
) -> None:
    """Cut off past the stale threshold, a worker finds its trial ended by another: it stops
    with one line, and the trial keeps the survivor's verdict."""
    spec = _spec(tiny_model_dir)

    class CutOff(PlanRunner):
        def measure(self, ctx):
            m = super().measure(ctx)
            study = optuna.load_study(study_name=ctx.study_name, storage=store.optuna)
            (t,) = [t for t in study.get_trials() if t.number == ctx.number]
            study.tell(t.number, state=optuna.trial.TrialState.FAIL)  # the survivor's verdict
            return m

    loop = StudyLoop(spec, store, CutOff(spec))
    with pytest.raises(UserError, match="ended as interrupted by another worker"):
        loop.run(n_trials=1)
    (t,) = loop.study.get_trials()
    assert t.state == optuna.trial.TrialState.FAIL


def test_the_budget_counts_every_worker_s_trials(tiny_model_dir: Path, store: Store) -> None:
    spec = _spec(tiny_model_dir, budget={"n_trials": 3})
    first = _loop(spec, store)
    first.run(n_trials=2)  # another worker's two trials
    second = _loop(spec, store)
    assert second.budget_used() == (2, 0)
    second.run()
    assert second.budget_used() == (3, 0)  # met: one more, not three


def test_the_loop_reads_the_study_twice_per_trial(tiny_model_dir: Path, store: Store) -> None:
    """Once as the trial starts (baseline checks, the pipeline's view) and once when it is told
    (progress, the next budget check), not once per question (it was 5 to 7)."""
    spec = _spec(tiny_model_dir)
    loop = _loop(spec, store)
    study_reads = 0
    get_trials = loop.study.get_trials

    def counted(*args, **kw):
        nonlocal study_reads
        study_reads += 1
        return get_trials(*args, **kw)

    loop.study.get_trials = counted  # type: ignore[method-assign]
    summary = loop.run(n_trials=4)
    assert summary.ran == 4
    # one read before the first trial (the budget), then two per trial; the study's trials
    # are fetched once more, by recovery's look for RUNNING trials (before it: 5 to 7 a trial)
    assert loop.reading.reads == 1 + 2 * 4
    assert study_reads == loop.reading.reads + 1


def test_the_loops_writes_go_through_its_reading_and_keep_it_current(
    tiny_model_dir: Path, store: Store
) -> None:
    """An enqueue or a tell through `StudyReading` is seen by the next question without a
    hand-made drop; other workers' writes only after a `refresh` (issue 35, item 2)."""
    from tuner.trial import TrialRecord

    loop = _loop(_spec(tiny_model_dir), store)
    reading = loop.reading
    assert reading.waiting() == [] and reading.reads == 1
    reading.enqueue({"max_num_seqs": 64}, TrialRecord(spec_id=loop.spec_id))
    assert [p.params for p in reading.waiting()] == [{"max_num_seqs": 64}]
    assert reading.reads == 2  # read again after our own write, once
    trial = loop.study.ask()
    reading.tell(trial, state=optuna.trial.TrialState.FAIL)
    assert [p.state for p in reading.points()] == ["FAIL"] and reading.reads == 3
    other = optuna.load_study(study_name=loop.name, storage=loop.study._storage)
    other.enqueue_trial({"max_num_seqs": 32}, user_attrs=TrialRecord(spec_id=loop.spec_id).encode())
    assert len(reading.points()) == 1  # another worker's write: not seen until asked for
    reading.refresh()
    assert len(reading.points()) == 2 and reading.reads == 4
