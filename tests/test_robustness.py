"""The knife-edge check: a chunk-aligned gain on fixed-length prompts is fragile, a smooth
gain is not (simulated 32B on 4×A6000, 1024 in / 1024 out at 2 req/s)."""

from __future__ import annotations

import math

import pytest

from tuner import trial as tr
from tuner.fidelity import robustness as rb
from tuner.measure.mixes import objective_of
from tuner.measure.modes import CapacityObjective, Objective
from tuner.spec.sections import ObjectiveSpec
from tuner.spec.study import load_study_spec
from tuner.trial import TrialPoint
from tuner.workload.request import BenchRequest, Workload
from tuner_testing import sim_study

pytestmark = pytest.mark.slow  # whole studies: `make test`, not `make test-fast`

BASE = {"max-num-seqs": 256, "max-num-batched-tokens": 2048, "gpu-memory-utilization": 0.9}
N = 100
SCALAR = Objective(ObjectiveSpec())
# capacity mode at the default resolution (5 %): a gain of at most ln(1.05) is within it
CAPACITY_MODE = CapacityObjective(ObjectiveSpec(mode="capacity", slo=["p99_ttft_ms<=800"]))


@pytest.fixture(scope="module")
def spec(tmp_path_factory, tiny_model_dir):
    workload = {
        "random_input_len": 1024,
        "random_output_len": 1024,
        "num_prompts": N,
        "request_rate": 2,
    }
    return load_study_spec(
        sim_study(tmp_path_factory.mktemp("rb"), tiny_model_dir, workload=workload)
    )


REQUESTS = [BenchRequest("", 1024, 1024, ignore_eos=True)] * N  # the planner reads lengths only


def _point(number: int, params: dict, **kw) -> TrialPoint:
    return TrialPoint(number, "COMPLETE", params, {"p99_ttft_ms": 1.0}, "feasible", **kw)


def test_a_chunk_boundary_gain_is_flagged_fragile(spec):
    knife = rb.gains(spec, REQUESTS, {**BASE, "max-num-batched-tokens": 1510}, BASE)
    beside = rb.gains(spec, REQUESTS, {**BASE, "max-num-batched-tokens": 1509}, BASE)
    # one token of mnbt: the knife edge (docs/robustness.md: 1510 gains 0.107, 1509 nothing)
    assert knife["nominal"] > 0.05 > abs(beside["nominal"])
    # 1510 keeps 40 % of its gain with prompts +3 % (over KEEP_SHARE); 1536 (1.5 prompts per
    # chunk) keeps 19 %: FRAGILE (docs/robustness.md's table)
    assert rb.verdict(knife, SCALAR)[0] is False
    aligned = rb.gains(spec, REQUESTS, {**BASE, "max-num-batched-tokens": 1536}, BASE)
    fragile, words = rb.verdict(aligned, SCALAR)
    assert fragile is True and words.startswith("FRAGILE") and "SIMULATED" in words


def test_a_smooth_gain_is_not_fragile(spec):
    found = rb.gains(spec, REQUESTS, {**BASE, "max-num-batched-tokens": 1024}, BASE)
    assert set(found) == {"nominal", *(p.name for p in rb.PERTURBATIONS)}
    fragile, words = rb.verdict(found, SCALAR)
    assert fragile is False and words.startswith("robust"), found


def test_verdict_rule():
    assert rb.verdict({"nominal": 0.2, "a": 0.1, "b": 0.06}, SCALAR)[0] is False
    assert rb.verdict({"nominal": 0.2, "a": 0.1, "b": 0.04}, SCALAR)[0] is True
    assert rb.verdict({"nominal": 0.2, "a": -math.inf}, SCALAR)[0] is True  # refused when perturbed
    assert rb.verdict({"nominal": 0.2, "a": None, "b": 0.2}, SCALAR)[0] is False  # baseline refused
    assert rb.verdict({"nominal": -0.1, "a": 0.3}, SCALAR)[0] is None  # no gain to keep


def test_perturbed_workloads(spec):
    s, reqs = rb.perturbed(spec, REQUESTS, rb.Perturbation("x", 1.03, 1.1))
    assert s.workload.request_rate == pytest.approx(2.2) and spec.workload.request_rate == 2
    assert {r.prompt_len for r in reqs} == {1055} and {r.output_len for r in reqs} == {1024}
    inf = spec.model_copy(
        update={"workload": spec.workload.model_copy(update={"request_rate": math.inf})}
    )
    assert all(p.rate_factor == 1.0 for p in rb.applicable(inf, objective_of(inf)))


def test_check_best_stores_the_verdict_for_best_and_report(spec):
    class Study:
        def __init__(self) -> None:
            self.user_attrs: dict = {}

        def set_user_attr(self, key, value):
            self.user_attrs[key] = value

    study = Study()
    base = _point(0, BASE, score=0.0, baseline=True, spec_id="s1")
    knife = _point(1, {**BASE, "max-num-batched-tokens": 1536}, score=-0.07, spec_id="s1")
    record = rb.check_best(study, spec, objective_of(spec), [base, knife], REQUESTS)
    assert record is not None and record.fragile is True
    stored = tr.StudyRecord.decode(study.user_attrs).robustness_of(knife)
    assert stored is not None and stored.verdict.startswith("FRAGILE") and not stored.measured
    assert study.user_attrs[f"{tr.ROBUSTNESS}1"]["verdict"] == stored.verdict  # the stored shape
    other = _point(1, {}, spec_id="other")
    assert tr.StudyRecord.decode(study.user_attrs).robustness_of(other) is None
    assert (
        rb.check_best(study, spec, objective_of(spec), [base], REQUESTS) is None
    )  # the baseline is the best


def test_plan_then_best_and_report_say_fragile_in_plain_words(tmp_path, tiny_model_dir):
    from tuner_testing import tuner

    space = {
        "parameters": {
            "max-num-batched-tokens": {
                "type": "categorical",
                "choices": [2048, 1536],
                "default": 2048,
            }
        }
    }
    workload = {
        "random_input_len": 1024,
        "random_output_len": 1024,
        "num_prompts": N,
        "request_rate": 2,
    }
    study = sim_study(tmp_path, tiny_model_dir, workload=workload, search_space=space)
    db = f"sqlite:///{tmp_path}/k.db"
    ran = tuner("plan", str(study), "--n-trials", "2", "--storage", db, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    best = tuner("best", str(study), "--storage", db, "--simulated", cwd=tmp_path)
    assert best.returncode == 0, best.stderr
    assert "--max-num-batched-tokens 1536" in best.stdout
    assert "# FRAGILE: its gain over the baseline does not survive" in best.stdout
    out = tmp_path / "r.html"
    rep = tuner("report", str(study), "-o", str(out), "--storage", db, "--simulated", cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    assert "FRAGILE: its gain over the baseline does not survive" in out.read_text()


CAPACITY = {"mode": "capacity", "slo": ["p99_ttft_ms<=1000"], "capacity": {"max_runs": 6}}


def test_a_capacity_study_is_checked_under_prompt_changes_only(tmp_path, tiny_model_dir):
    workload = {"random_input_len": 1024, "random_output_len": 256, "num_prompts": 40}
    spec = load_study_spec(
        sim_study(tmp_path, tiny_model_dir, workload=workload, objective=CAPACITY)
    )
    reqs = [BenchRequest("", 1024, 256, ignore_eos=True)] * 40
    found = rb.gains(spec, reqs, {**BASE, "max-num-batched-tokens": 4096}, BASE)
    assert set(found) == {"nominal", "prompts -3%", "prompts +3%"}  # the search sets the rate
    assert found["nominal"] > 0.1  # ln(capacity ratio): more capacity than vLLM's defaults
    record = rb.check(
        spec,
        objective_of(spec),
        reqs,
        _point(1, {**BASE, "max-num-batched-tokens": 4096}),
        _point(0, BASE),
    )
    assert record.fragile is not None and "capacity ×" in record.verdict


def test_one_check_over_any_runner_compares_the_config_run_by_run_with_the_baseline():
    """`compare`, the check on the simulator and on the engine alike: the config runs first
    and a failed config is the whole check's failure (no baseline run); a run refused for the
    baseline has no gain (None), one refused for the config loses it all (−inf)."""
    calls: list[str] = []

    def run(params: dict, who: str) -> dict[str, float | None] | str:
        calls.append(who)
        if params.get("broken"):
            return f"the {who} failed: refused"
        if who == "config":
            return {"nominal": 3.0, "a": None, "b": 2.0}
        return {"nominal": 1.0, "a": 1.0, "b": None}

    def gain(name: str, mine: float, base: float) -> float:
        return mine - base

    found, runs, failure = rb.compare(run, gain, {}, BASE)
    assert calls == ["config", "baseline"] and failure is None
    assert found == {"nominal": 2.0, "a": -math.inf, "b": None}
    assert runs == {"nominal": (3.0, 1.0), "a": (None, 1.0), "b": (2.0, None)}
    calls.clear()
    assert rb.compare(run, gain, {"broken": True}, BASE) == (
        {},
        {},
        "the config failed: refused",
    )
    assert calls == ["config"]  # a failed config: the baseline is not run


def test_capacity_verdict_words_and_the_resolution_rule():
    log = math.log
    assert rb.verdict({"nominal": log(1.4), "prompts -3%": log(1.3)}, CAPACITY_MODE) == (
        False,
        "robust: keeps its gain under prompts ±3% (the capacity search sets the rate) "
        "(SIMULATED: capacity ×1.400, capacity ×1.300 at worst)",
    )
    fragile, words = rb.verdict({"nominal": log(1.4), "prompts +3%": log(1.02)}, CAPACITY_MODE)
    assert fragile is True and "capacity ×1.020 with prompts +3%" in words
    fragile, words = rb.verdict({"nominal": log(1.04), "x": 0.0}, CAPACITY_MODE)
    assert fragile is None and "resolution" in words


def test_a_verdict_measured_on_the_engine_never_calls_its_gain_simulated():
    log, measured = math.log, "measured on the engine"
    for found in ({"nominal": log(1.04), "x": 0.0}, {"nominal": -0.1}):
        fragile, words = rb.verdict(found, CAPACITY_MODE, source=measured)
        assert fragile is None and "simul" not in words.lower(), words
    fragile, words = rb.verdict({"nominal": log(1.04), "x": 0.0}, CAPACITY_MODE)
    assert "the simulated gain (capacity ×1.040)" in words
    fragile, words = rb.verdict({"nominal": log(1.04)}, CAPACITY_MODE, source=measured)
    assert "the measured gain (capacity ×1.040)" in words


def test_a_runner_measures_the_workload_handed_in_and_a_variant_is_a_new_runner(
    tmp_path, tiny_model_dir
):
    """The workload is a value given when a runner is made (issue 35): the runner measures
    those requests, `built()` gives them back, and another spec's runner (`with_spec`) is a
    new one that leaves the first one's requests as they were."""
    spec = load_study_spec(sim_study(tmp_path, tiny_model_dir))
    whole = rb.PlanRunner(spec).requests
    part = Workload(tuple(whole[:3]))
    runner = rb.PlanRunner(spec, workload=part)
    assert runner.requests == whole[:3] and runner.built() == part
    m = rb.simulated(runner, BASE)
    assert m is not None and m.metrics["completed"] == 3
    other = runner.with_spec(spec, Workload())  # nothing given: built from its spec
    assert other.requests == whole and runner.requests == whole[:3]
    assert not hasattr(runner, "use_requests")


def test_a_scenario_mix_perturbs_every_scenario_and_scores_the_mix(tmp_path, tiny_model_dir):
    mix = [
        {"name": "chat", "weight": 3, "dataset_name": "random", "random_input_len": 256},
        {"name": "doc", "weight": 1, "dataset_name": "random", "random_input_len": 2048},
    ]
    workload = [
        {**s, "tokenizer": str(tiny_model_dir), "num_prompts": 16, "request_rate": 4} for s in mix
    ]
    spec = load_study_spec(sim_study(tmp_path, tiny_model_dir, workload=workload))
    nominal = rb.PlanRunner(spec)
    p = rb.PERTURBATIONS[1]  # prompts +3%
    theirs = {name: nominal.requests_for(name) for name in spec.workloads}
    runner = rb._runner(*rb.perturbed(spec, nominal.requests, p), theirs, p)
    for name in ("chat", "doc"):
        before = [r.prompt_len for r in nominal.requests_for(name)]
        after = [r.prompt_len for r in runner.requests_for(name)]
        assert after == [max(1, round(n * 1.03)) for n in before] and after != before
    faster, _ = rb.perturbed(spec, [], rb.PERTURBATIONS[3])
    assert [w.request_rate for w in faster.workloads.values()] == pytest.approx([4.4, 4.4])
    params = {**BASE, "max-num-batched-tokens": 1024}
    found = rb.gains(spec, nominal.requests, params, BASE)
    assert set(found) == {"nominal", *(q.name for q in rb.PERTURBATIONS)}
    assert all(g is not None and math.isfinite(g) for g in found.values()), found
    assert found != dict.fromkeys(found, found["nominal"])  # the changes change the mix's score
