"""The smallest change that keeps the gain (issue 34, item 2): of the flags the best config
changes, recommend only those whose revert to vLLM's default loses the gain."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tuner.fidelity.smallest import changed_flags, reverted, smallest_change
from tuner.measure.mixes import objective_of
from tuner.results.smallest import shipped_params, smallest_lines
from tuner.trial import SmallestChange, StudyRecord, TrialPoint, TrialRecord, write_smallest

DEFAULTS = {"max-num-batched-tokens": 2048, "block-size": 16, "gpu-memory-utilization": 0.92}
TUNED = {"max-num-batched-tokens": 4096, "block-size": 32, "gpu-memory-utilization": 0.82}
NOISE = 0.01  # a score change this small is noise in these tests


def _scorer(effects: dict[str, float], together: float = 0.0, refused: tuple = ()):
    """A score: the sum of each changed flag's effect (negative: a gain), plus `together`
    when both `block-size` and `gpu-memory-utilization` are at their defaults."""
    calls: list[dict[str, Any]] = []

    def score(params: dict[str, Any]) -> float | None:
        calls.append(params)
        if any(params[f] == DEFAULTS[f] for f in refused):  # the engine refuses it reverted
            return None
        s = sum(v for f, v in effects.items() if params[f] != DEFAULTS[f])
        if all(params[f] == DEFAULTS[f] for f in ("block-size", "gpu-memory-utilization")):
            s += together
        return s

    return score, calls


def _loses(full: float, other: float) -> tuple[bool, str]:
    return (other - full > NOISE, "clearly worse" if other - full > NOISE else "within noise")


def _find(score) -> SmallestChange:
    found = smallest_change(TUNED, DEFAULTS, score, _loses, lambda s: s)
    assert found is not None
    return found


def test_only_the_flag_that_carries_the_gain_is_kept() -> None:
    # the demo's shape: max-num-batched-tokens carries the gain, the other two are noise
    score, _ = _scorer({"max-num-batched-tokens": -0.2, "block-size": -0.001})
    found = _find(score)
    assert found.kept == ("max-num-batched-tokens",)
    assert found.params == {**DEFAULTS, "max-num-batched-tokens": 4096}
    by_flag = {r.flag: r for r in found.reverts}
    assert by_flag["max-num-batched-tokens"].carries
    assert abs(by_flag["max-num-batched-tokens"].score_change - 0.2) < 1e-9
    assert not by_flag["block-size"].carries and by_flag["block-size"].why == "within noise"
    assert abs(by_flag["block-size"].score_change - 0.001) < 1e-9
    assert [r.flag for r in found.dropped] == ["block-size", "gpu-memory-utilization"]
    assert abs(found.score - -0.201) < 1e-9 and abs(found.kept_score - -0.2) < 1e-9


def test_flags_that_matter_only_together_are_put_back_costliest_first() -> None:
    # each alone is noise, both reverted lose 0.05: the one whose revert cost more comes back
    score, _ = _scorer(
        {"max-num-batched-tokens": -0.2, "block-size": -0.004, "gpu-memory-utilization": -0.002},
        together=0.05,
    )
    found = _find(score)
    assert found.kept == ("max-num-batched-tokens", "block-size")
    assert found.params["gpu-memory-utilization"] == 0.92 and found.params["block-size"] == 32
    assert not {r.flag: r for r in found.reverts}["block-size"].carries  # kept only together


def test_a_flag_whose_revert_the_engine_refuses_is_kept() -> None:
    score, _ = _scorer({"max-num-batched-tokens": -0.2}, refused=("block-size",))
    found = _find(score)
    assert "block-size" in found.kept
    refused = {r.flag: r for r in found.reverts}["block-size"]
    assert refused.carries and refused.score_change is None


def test_nothing_is_dropped_when_the_gain_itself_is_noise() -> None:
    score, _ = _scorer({"max-num-batched-tokens": -0.004, "block-size": -0.001})
    found = _find(score)
    assert not found.checked and found.kept == () and found.reverts == ()
    assert found.note.startswith("not decided: its gain over vLLM's defaults (score -0.005)")
    assert found.note.endswith("within noise; every changed flag kept")
    point = _point(2, TUNED)
    assert shipped_params(replace(found, trial=2), point) == TUNED


def test_nothing_to_check_when_the_config_itself_cannot_be_scored() -> None:
    assert smallest_change(TUNED, DEFAULTS, lambda p: None, _loses, lambda s: s) is None
    assert changed_flags(DEFAULTS, DEFAULTS) == []
    assert changed_flags({**TUNED, "new-flag": 1}, DEFAULTS) == list(TUNED)  # no default: stays
    assert reverted(TUNED, DEFAULTS, ["block-size"])["block-size"] == 16


def _point(number: int, params: dict[str, Any]) -> TrialPoint:
    return TrialPoint.measured_as(number, params, TrialRecord(metrics={"mean_tpot_ms": 1.0}))


class _Study:
    def __init__(self) -> None:
        self.user_attrs: dict[str, Any] = {}

    def set_user_attr(self, key: str, value: Any) -> None:
        self.user_attrs[key] = value


def test_the_stored_check_gives_the_command_and_the_words() -> None:
    score, _ = _scorer({"max-num-batched-tokens": -0.2, "block-size": -0.001})
    found = _find(score)
    study = _Study()
    write_smallest(study, 5, SmallestChange(**{**found.__dict__, "trial": 5, "note": "cal"}))
    point = _point(5, TUNED)
    change = StudyRecord.of(study).smallest_of(point)
    assert change is not None and change.kept == ("max-num-batched-tokens",)
    assert shipped_params(change, point) == found.params
    assert shipped_params(change, _point(6, TUNED)) == TUNED  # another trial: its own flags
    lines = smallest_lines(change, point)
    assert lines[0].startswith(
        "the smallest change that keeps the gain (SIMULATED, cal): the command changes only "
        "--max-num-batched-tokens 4096, the others are at vLLM's defaults"
    )
    assert (
        "dropped --block-size 32 → 16: reverting it changes the SIMULATED score by +0.001, "
        "within noise" in lines
    )
    assert "SIMULATED score of the command: -0.200 (with every flag: -0.201)" in lines


def test_best_and_export_recommend_only_the_flags_that_carry_the_gain(tmp_path) -> None:
    """A hand-built study whose stored check keeps `max-num-seqs` alone: `best` and `export`
    (shell, JSON; YAML's comments are the shell's) write the smaller command and name each
    dropped flag; `--trial N` writes the trial's every flag."""
    import json

    import optuna
    from results_fixtures import build_study

    from tuner import trial as tr
    from tuner.trial import FlagRevert
    from tuner_testing import tuner

    clear = {0: (1500.0, 70.0, 1000.0, 0.0, "ok"), 1: (1450.0, 50.0, 1010.0, -0.35, "ok")}
    study_file, url = build_study(tmp_path, trials=clear)
    study = optuna.load_study(study_name="handbuilt", storage=url)
    best = tr.best(tr.read_all(study.get_trials()))
    assert best is not None and best.number == 1
    keep = FlagRevert("max-num-seqs", 64, 256, 0.3, True, "clearly worse on mean TPOT")
    drop = FlagRevert("block-size", 32, 16, 0.002, False, "within noise")
    defaults = {**best.params, "block-size": 16}
    tr.write_smallest(
        study,
        1,
        SmallestChange(
            best.spec_id,
            True,
            "cal",
            (keep, drop),
            ("max-num-seqs",),
            defaults,
            -0.35,
            -0.348,
            trial=1,
        ),
    )

    def cli(*args: str):
        done = tuner(*args, str(study_file), "--storage", url, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return done.stdout

    dropped = (
        "dropped --block-size 32 → 16: reverting it changes the SIMULATED score by +0.002, "
        "within noise"
    )
    from tuner.results.best import best_report

    points = tr.read_all(study.get_trials())
    best_text = best_report(points, "handbuilt", StudyRecord.of(study))  # `tuner best`, in-process
    for out in (best_text, cli("export")):
        assert f"# {dropped}" in out
        command = "\n".join(line for line in out.splitlines() if not line.startswith("#"))
        assert "--max-num-seqs 64" in command and "--block-size 32" not in command
    doc = json.loads(cli("export", "--format", "json"))
    assert doc["params"]["block-size"] == 16 and doc["trial_params"]["block-size"] == 32
    assert doc["smallest_change"]["kept"] == ["max-num-seqs"]
    asked = cli("export", "--trial", "1")
    assert "--block-size 32" in asked and "dropped" not in asked


# The demo's kind of load, smaller (tests/test_robustness_measured.py): ~2k-token prompts near
# the box's prefill capacity, where a chunk budget of 1024 tokens cuts TPOT; 32 requests never
# fill 64 sequences, so `max-num-seqs` changes nothing (16 requests: the gain is within noise).
BASE = {"max-num-seqs": 256, "max-num-batched-tokens": 2048, "gpu-memory-utilization": 0.9}
LOADED = {
    "random_input_len": 2048,
    "random_output_len": 32,
    "random_range_ratio": 0.2,
    "num_prompts": 32,
    "request_rate": 2.2,
}


def test_the_simulator_and_the_engine_path_keep_the_chunk_budget_alone(
    tmp_path, tiny_model_dir
) -> None:
    """The check on the calibrated simulator, and the `--confirm` path through a runner's
    `measure` (here the planner, the same `TrialRunner` interface as an engine's): the chunk
    budget carries the gain, `max-num-seqs` is dropped, and the measured check re-measures
    only what the simulator dropped; each record stored under its key."""
    from tuner.fidelity import smallest_check, smallest_measured
    from tuner.runners.plan import PlanRunner
    from tuner.spec.study import load_study_spec
    from tuner.trial.scoring import score_trial
    from tuner.trial.smallest import SIMULATED
    from tuner_testing import sim_study

    spec = load_study_spec(sim_study(tmp_path, tiny_model_dir, workload=LOADED))
    runner = PlanRunner(spec)
    runner.prepare()
    mine = {**BASE, "max-num-batched-tokens": 1024, "max-num-seqs": 64}
    base_m = runner.measure(_ctx(spec, BASE))
    base = TrialPoint.measured_as(
        0, BASE, TrialRecord(metrics=dict(base_m.metrics), cis=dict(base_m.ci), baseline=True)
    )
    best = TrialPoint.measured_as(3, mine, TrialRecord(metrics={"mean_tpot_ms": 1.0}, score=-1))
    found = smallest_check.check(spec, StudyRecord(), runner.requests, best, base)
    assert found.checked and found.source == SIMULATED and found.trial == 3, found.note
    assert found.kept == ("max-num-batched-tokens",)
    assert found.params == {**BASE, "max-num-batched-tokens": 1024}
    assert found.note == "the simulator with the study's own profile (no calibration stored)"
    study = _Study()
    assert smallest_measured.check_best_measured(study, spec, [base, best], runner) is None
    write_smallest(study, 3, found)  # what the simulator dropped, the engine re-measures
    measure, started = runner.measure, []
    runner.measure = lambda ctx: started.append(ctx.params) or measure(ctx)  # type: ignore
    measured = smallest_measured.check_best_measured(study, spec, [base, best], runner)
    assert measured is not None and measured.measured and measured.checked
    assert measured.source == SIMULATED  # a simulator's figures, wherever they come from
    assert measured.note.startswith("on the study's engine, the simulator (tuner sim serve)")
    assert measured.kept == ("max-num-batched-tokens",)
    assert [r.flag for r in measured.reverts] == ["max-num-seqs"]  # only what was dropped
    assert started == [mine, {**mine, "max-num-seqs": 256}]  # reverted alone = all together
    assert StudyRecord.of(study).smallest_of(best) == measured  # the measured one is used
    assert "kept max-num-batched-tokens: not re-measured, the simulator kept them" in (
        smallest_lines(measured, best)
    )
    assert sorted(study.user_attrs) == ["tuner_smallest:3", "tuner_smallest_measured:3"]
    # after `--confirm` re-ran the best config, its latest re-run stands for it: one start
    m = measure(_ctx(spec, mine))
    scored = score_trial(spec, objective_of(spec), m, base)
    again = TrialRecord(metrics=dict(m.metrics), cis=dict(m.ci), confirm_of=3, **scored.fields())
    rerun = TrialPoint.measured_as(4, mine, again)
    started.clear()
    smallest_measured.check_best_measured(study, spec, [base, best, rerun], runner)
    assert started == [{**mine, "max-num-seqs": 256}]


def _ctx(spec, params):
    from tuner.runners.trial_runner import TrialContext

    return TrialContext(spec.name, -1, dict(params), phase=lambda _: None)


def test_the_check_is_not_run_again_while_the_best_and_its_record_are_unchanged(
    monkeypatch,
) -> None:
    """The end of every `tuner run` checks the best config's flags; a run that found no new
    best (and no new calibration) keeps the stored record instead of simulating it again.
    A new best, another spec or a new calibration checks again."""
    from tuner.fidelity import smallest_check

    calls: list[int] = []
    own = "the simulator with the study's own profile (no calibration stored)"

    def check(spec, study, requests, point, base, points=()) -> SmallestChange:
        calls.append(point.number)
        return SmallestChange(point.spec_id, True, own, trial=point.number)

    monkeypatch.setattr(smallest_check, "check", check)

    def point(number: int, score: float, spec_id: str = "s1") -> TrialPoint:
        record = TrialRecord(metrics={"mean_tpot_ms": 1.0}, score=score, baseline=number == 0)
        return replace(TrialPoint.measured_as(number, dict(TUNED), record), spec_id=spec_id)

    study, said = _Study(), []
    base, best = point(0, 0.0), point(3, -0.2)
    for _ in range(2):
        found = smallest_check.check_best(study, None, [base, best], [], say=said.append)  # type: ignore[arg-type]
        assert found is not None and found.trial == 3
    assert calls == [3]  # the second run kept the stored record
    assert said[-1] == "which of trial 3's changed flags carry its gain: checked already"
    newer = point(5, -0.3)
    smallest_check.check_best(study, None, [base, best, newer], [])  # type: ignore[arg-type]
    assert calls == [3, 5]  # a new best: checked
    study.user_attrs["tuner_smallest:5"]["note"] = (
        "the simulator calibrated on 4 of this study's trials"
    )
    smallest_check.check_best(study, None, [base, best, newer], [])  # type: ignore[arg-type]
    assert calls == [3, 5, 5]  # checked on another simulator than the study's now: again
    moved = [point(0, 0.0, "s2"), point(5, -0.3, "s2")]
    smallest_check.check_best(study, None, moved, [])  # type: ignore[arg-type]
    assert calls == [3, 5, 5, 5]  # another spec: again


def test_a_flag_the_simulator_does_not_model_is_judged_on_the_study_s_own_trials(
    tmp_path, tiny_model_dir
) -> None:
    """Issue 50 item 3: an environment variable (or a flag the simulator ignores) reverts at
    "+0.000, no worse" on the simulator whatever it does, and was dropped from `best` and
    `export` though the study measured −0.53 with it and −0.24 without. It is judged on the
    study's own trials, and kept when the study never measured the config without it."""
    from tuner.fidelity import smallest_check
    from tuner.fidelity.smallest import UNJUDGED
    from tuner.runners.plan import PlanRunner
    from tuner.spec.study import load_study_spec
    from tuner.trial.smallest import MEASURED
    from tuner_testing import sim_study

    backend = {"type": "categorical", "choices": ["FLASH_ATTN", "FLASHINFER"],
               "env": "VLLM_ATTENTION_BACKEND", "default": "FLASH_ATTN"}  # fmt: skip
    chunk = {"type": "int", "low": 256, "high": 16384, "log": True, "default": 2048}
    space = {"parameters": {"max-num-batched-tokens": chunk, "backend": backend}}
    spec = load_study_spec(sim_study(tmp_path, tiny_model_dir, workload=LOADED, search_space=space))
    runner = PlanRunner(spec)
    runner.prepare()
    defaults = {"max-num-batched-tokens": 2048, "backend": "FLASH_ATTN"}
    mine = {"max-num-batched-tokens": 1024, "backend": "FLASHINFER"}
    without = {**mine, "backend": "FLASH_ATTN"}

    def trial(number: int, params: dict[str, Any], score: float, tpot_ms: float) -> TrialPoint:
        metrics = {"p99_ttft_ms": 2000.0, "mean_tpot_ms": tpot_ms, "output_throughput": 500.0}
        cis = {m: (0.98 * v, 1.02 * v) for m, v in metrics.items()}
        record = TrialRecord(metrics=metrics, cis=cis, score=score, baseline=number == 0)
        return TrialPoint.measured_as(number, params, record)

    base, best = trial(0, defaults, 0.0, 200.0), trial(1, mine, -0.53, 100.0)
    for points, carries, why in (
        ([base, best, trial(2, without, -0.24, 150.0)], True, "clearly worse on mean TPOT"),
        ([base, best, trial(2, without, -0.529, 100.1)], False, "within noise"),
        ([base, best], True, UNJUDGED),
    ):
        found = smallest_check.check_best(_Study(), spec, points, runner.requests)
        assert found is not None and found.checked, found
        by_flag = {r.flag: r for r in found.reverts}
        assert by_flag["backend"].carries is carries and by_flag["backend"].why.startswith(why)
        assert ("backend" in found.kept) is carries
        if why != UNJUDGED:
            assert by_flag["backend"].source == MEASURED
            assert by_flag["backend"].score_change == pytest.approx(points[2].score + 0.53)
            assert f"the {MEASURED} score by" in "\n".join(smallest_lines(found, best))
