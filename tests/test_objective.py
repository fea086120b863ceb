"""Objective arithmetic, constraints and the noise check."""

from __future__ import annotations

import math

import pytest

from tuner.measure.measurement import Measurement
from tuner.measure.mixes import MIXES, CapacityMix, ScenarioMix, objective_of
from tuner.measure.mode_words import WORDS, words_of
from tuner.measure.modes import MODES, CapacityObjective, Objective, RunFigures, RunOne
from tuner.measure.objective import (
    PENALTY_SCORE,
    clearly_better,
    constraints,
    score,
)
from tuner.spec.sections import ObjectiveSpec
from tuner.spec.study import StudySpec
from tuner.spec.workload import WorkloadSpec


def mode_of(spec: ObjectiveSpec) -> Objective:
    """One workload's objective object (`tuner.measure.modes.objective_of` without a study)."""
    return MODES[spec.mode](spec)


W = {"p99_ttft_ms": 1.0, "mean_tpot_ms": 1.0, "output_throughput": 1.0}
BASE = {"p99_ttft_ms": 1000.0, "mean_tpot_ms": 50.0, "output_throughput": 400.0}


def test_baseline_scores_zero() -> None:
    assert score(BASE, BASE, W) == 0.0


def test_worked_example_from_docs() -> None:
    # docs/objective.md: TTFT halves, TPOT +10 %, throughput +25 %.
    trial = {"p99_ttft_ms": 500.0, "mean_tpot_ms": 55.0, "output_throughput": 500.0}
    expected = math.log(0.5) + math.log(1.1) - math.log(1.25)
    assert score(trial, BASE, W) == pytest.approx(expected)
    assert score(trial, BASE, W) == pytest.approx(-0.8210, abs=1e-4)


def test_weights_and_directions() -> None:
    faster = {**BASE, "output_throughput": 800.0}
    assert score(faster, BASE, W) == pytest.approx(-math.log(2))
    assert score(faster, BASE, {"output_throughput": 2.0}) == pytest.approx(-2 * math.log(2))
    slower_ttft = {**BASE, "p99_ttft_ms": 2000.0}
    assert score(slower_ttft, BASE, {"p99_ttft_ms": 1.0, "mean_tpot_ms": 0.0}) > 0


def test_multi_objective_values_and_penalties() -> None:
    multi = mode_of(ObjectiveSpec(mode="multi"))
    assert multi.trial_values(0.0, RunFigures(BASE, 0.0), RunFigures(BASE, 0.0)) == [
        1000.0,
        50.0,
        400.0,
    ]
    assert multi.penalty_values() is None  # nothing measured yet
    worse = {"p99_ttft_ms": 3000.0, "mean_tpot_ms": 40.0, "output_throughput": 100.0}
    assert multi.penalty_values([BASE, worse]) == [3000.0, 50.0, 100.0]
    assert mode_of(ObjectiveSpec()).penalty_values() == [PENALTY_SCORE]


def test_one_object_per_mode() -> None:
    """Every mode the study file accepts has its object, and each answers for its mode."""
    modes = ObjectiveSpec.model_fields["mode"].annotation.__args__  # type: ignore[union-attr]
    assert set(MODES) == set(modes)
    scalar = mode_of(ObjectiveSpec(weights={"p99_ttft_ms": 2.0, "mean_tpot_ms": 1.0}))
    assert scalar.directions() == {"score": "minimize"}
    faster = RunFigures({**BASE, "p99_ttft_ms": 500.0}, 0.0)
    assert scalar.trial_values(0.0, faster, RunFigures(BASE, 0.0)) == [
        pytest.approx(-2 * math.log(2))
    ]
    assert (scalar.score_span().scale, scalar.score_span().floor) == (3.0, 2.0)
    assert scalar.score_span().searched == () and scalar.resolution() is None
    assert scalar.stated_metrics() == ["p99_ttft_ms", "mean_tpot_ms", "output_throughput"]
    multi = mode_of(ObjectiveSpec(mode="multi", objectives=["p99_ttft_ms", "mean_e2el_ms"]))
    assert list(multi.directions().values()) == ["minimize", "minimize"]
    assert multi.early_stop(False) == "slo" and multi.early_stop(True) is None
    assert scalar.early_stop(False) == "incumbent" and scalar.early_stop(True) is None
    assert multi.stated_metrics()[-1] == "mean_e2el_ms"
    cap = mode_of(ObjectiveSpec(mode="capacity", slo=["p99_ttft_ms<=800"]))
    assert isinstance(cap, CapacityObjective) and cap.has_capacity and not scalar.has_capacity
    assert cap.early_stop(True) == cap.early_stop(False) == "slo"  # above capacity whoever runs
    assert cap.directions() == {"capacity_rps": "maximize"}
    assert cap.penalty_values() == [0.0] and cap.stated_metrics() == ["capacity_rps"]
    assert cap.resolution() == 0.05 and cap.score_span().searched == ("capacity_rps",)


def test_each_kind_of_objective_has_its_words() -> None:
    """The words live apart from the decisions (`tuner.measure.mode_words`), by kind."""
    scalar = words_of(mode_of(ObjectiveSpec()))
    cap = words_of(mode_of(ObjectiveSpec(mode="capacity", slo=["p99_ttft_ms<=800"])))
    assert cap.gain(None, 6.0, 3.0) == "capacity 3 → 6 req/s"
    assert cap.gain(None, 6.0, None) == "capacity 6 req/s"
    assert scalar.gain(-0.25, None, None) == "score -0.250 against the defaults' 0"
    assert scalar.rate(2.5) == "2.5 req/s" and scalar.rate(math.inf) == "all at once"
    assert cap.rate(2.5) == "rate searched for the capacity"
    assert scalar.run_label(2.5) is None and cap.run_label(2.5) == "at 2.5 req/s"
    assert scalar.load_hint(heavier=False) == "a lower rate (--rate)"
    assert cap.load_hint(heavier=True) is None


def test_constraints() -> None:
    spec = ObjectiveSpec(slo=["p99_ttft_ms<=800"], max_failed_fraction=0.1)
    c = constraints(spec, BASE, failed_fraction=0.0)
    assert c["measured"] == 0.0 and c["failed_requests"] < 0
    assert c["p99_ttft_ms<=800"] == pytest.approx(0.25)
    ok = constraints(spec, {**BASE, "p99_ttft_ms": 700.0})
    assert ok["p99_ttft_ms<=800"] == 0.0
    assert constraints(spec, BASE, failed_fraction=0.5)["failed_requests"] > 0
    missing = constraints(spec, None)
    assert missing["measured"] > 0 and missing["p99_ttft_ms<=800"] > 0


def test_clearly_better_is_the_interval_of_the_difference() -> None:
    a = {"p99_ttft_ms": (100.0, 120.0)}
    assert clearly_better(a, {"p99_ttft_ms": (130.0, 150.0)}, W)
    # 110 against 130: the difference's interval, 20 ± hypot(10, 20), includes 0
    assert not clearly_better(a, {"p99_ttft_ms": (110.0, 150.0)}, W)
    # overlapping intervals, a clear difference: 86 against 100, 14 > hypot(6, 10) = 11.7
    tpot = {"mean_tpot_ms": (80.0, 92.0)}
    assert clearly_better(tpot, {"mean_tpot_ms": (90.0, 110.0)}, W)
    # the estimates decide which side of each interval counts: 91 sits at the top of its own
    assert not clearly_better(tpot, {"mean_tpot_ms": (90.0, 110.0)}, W, {"mean_tpot_ms": 91.0})
    thr = {"output_throughput": (500.0, 600.0)}
    assert clearly_better(thr, {"output_throughput": (300.0, 400.0)}, W)
    assert not clearly_better(thr, {"output_throughput": (300.0, 400.0)}, {"output_throughput": 0})


# The scenario mix as a composite objective (issue 35) ----------------------------------------

STUDY = {
    "name": "s",
    "engine": {"model": "m"},
    "search_space": {"parameters": {"max-num-seqs": {"type": "int", "low": 1, "high": 8}}},
}
CHAT = {"name": "chat", "weight": 3, "dataset_name": "random", "slo": ["p99_ttft_ms<=500"]}
DOC = {"name": "doc", "weight": 1, "dataset_name": "random", "random_input_len": 4096}


def _study(**kw: object) -> StudySpec:
    return StudySpec.model_validate({**STUDY, "workload": {"dataset_name": "random"}, **kw})


def _runs(failing: str | None = None) -> tuple[list[str], RunOne]:
    """A fake engine start: each run's name recorded; `failing`'s run fails."""
    seen: list[str] = []

    def one(name: str, w: WorkloadSpec) -> Measurement:
        seen.append(name)
        metrics = None if name == failing else {"p99_ttft_ms": w.random_input_len / 10}
        return Measurement(metrics=metrics, workload_s=10.0, engine_s=12.0)

    return seen, one


def _no_search(name: str, w: WorkloadSpec) -> Measurement:
    raise AssertionError("a scalar study runs its workloads, never a rate search")


def test_the_factory_builds_a_composite_for_a_mix_and_a_plain_object_otherwise() -> None:
    slo = {"slo": ["p99_ttft_ms<=900"]}
    assert type(objective_of(_study())) is Objective
    mix = objective_of(_study(workload=[CHAT, DOC], objective=slo))
    assert isinstance(mix, ScenarioMix) and set(mix.parts) == {"chat", "doc"}
    assert all(type(p) is Objective for p in mix.parts.values())
    cap = objective_of(_study(workload=[CHAT, DOC], objective={"mode": "capacity", **slo}))
    assert isinstance(cap, CapacityMix) and cap.mode == "capacity"
    assert all(isinstance(p, CapacityObjective) for p in cap.parts.values())
    # what the mix changes: no incumbent, no one-run figures, no one served workload, no beat
    assert (mix.early_stop(False), mix.early_stop(True)) == ("slo", None)
    assert cap.early_stop(False) == cap.early_stop(True) == "slo"
    assert not mix.one_run_figures and mix.served_workload(_study().workload) is None
    assert cap.to_beat(6.0, 3.0) is None
    # what the mode decides stays the mode's: the capacity mix searches, the scalar one runs
    assert cap.has_capacity and cap.stated_rate(2.0) == 2.0
    assert not mix.has_capacity and mix.stated_rate(2.0) is None
    by_name = lambda parts: Measurement(ci={n: (0.0, 0.0) for n in parts}, records=[])  # noqa: E731
    searched = cap.measure(DOC_W, lambda *_: RAN, lambda *_: SEARCHED, lambda parts: parts["chat"])
    ran = mix.measure(DOC_W, lambda *_: RAN, lambda *_: SEARCHED, lambda parts: parts["chat"])
    assert searched is SEARCHED and ran is RAN
    assert set(cap.measure(DOC_W, lambda *_: RAN, lambda *_: SEARCHED, by_name).ci) == {
        "chat",
        "doc",
    }


RAN, SEARCHED = Measurement(metrics={"ran": 1.0}), Measurement(metrics={"searched": 1.0})
DOC_W = WorkloadSpec(dataset_name="random")


def test_a_mix_runs_each_scenario_and_stops_at_a_failure() -> None:
    spec = _study(workload=[CHAT, DOC], objective={"slo": ["p99_ttft_ms<=900"]})
    mix, plain = objective_of(spec), objective_of(_study())
    seen, one = _runs()
    got = mix.measure(
        spec.workload, one, _no_search, lambda parts: Measurement(metrics={"n": len(parts)})
    )
    assert seen == ["chat", "doc"] and got.metrics == {"n": 2}
    seen, one = _runs(failing="doc")
    ended = mix.measure(spec.workload, one, _no_search, lambda parts: RAN)
    assert ended.metrics is None and (ended.workload_s, ended.engine_s) == (20.0, 24.0)
    seen, one = _runs()
    alone = plain.measure(spec.workload, one, _no_search, lambda parts: RAN)
    assert seen == [""] and alone.metrics == {"p99_ttft_ms": 102.4}


def test_a_mix_judges_its_slos_per_scenario_never_on_the_pooled_figures() -> None:
    slo = {"slo": ["p99_ttft_ms<=900"], "max_failed_fraction": 0.1}
    single = objective_of(_study(objective=slo)).trial_constraints({"p99_ttft_ms": 1800.0}, 0.0)
    assert single["p99_ttft_ms<=900"] == pytest.approx(1.0)
    mix = objective_of(_study(workload=[CHAT, DOC], objective=slo))
    assert mix.trial_constraints({"p99_ttft_ms": 1800.0}, 0.05) == {
        "measured": 0.0,
        "failed_requests": pytest.approx(-0.05),
    }


def test_a_mix_judges_each_scenarios_run_and_aggregates_them() -> None:
    """Which runs a trial is judged on, their scores and capacities as the trial's, and the
    constraints its score adds: the one run's, or each scenario's (`trial.scoring` packs
    the runs from its payloads and asks these)."""
    slo = {"slo": ["p99_ttft_ms<=900"]}
    plain = objective_of(_study(objective=slo))
    assert plain.judged_runs("whole", {"chat": "c"}) == {"": "whole"}
    assert plain.trial_figures({"": 0.25}, {"": 4.0}) == (0.25, None)
    assert plain.score_constraints({"p99_ttft_ms<=900": 1.0}, {"": None}) == {}  # SLOs: before
    one = objective_of(_study(objective={"mode": "capacity", **slo}))
    assert one.trial_figures({"": 0.1}, {"": None}) == (0.1, None)
    assert one.trial_figures({"": 0.1}, {"": 2.0}) == (0.1, 2.0)
    assert one.score_constraints({}, {"": 2.0}) == {"capacity": 0.0}
    assert one.score_constraints({}, {"": None}) == {"capacity": 1.0}
    mix = objective_of(_study(workload=[CHAT, DOC], objective=slo))
    assert mix.judged_runs("whole", {"chat": "c", "doc": "d"}) == {"chat": "c", "doc": "d"}
    scores = {"chat": 0.1, "doc": -0.3}
    found: dict[str, float | None] = {"chat": 4.0, "doc": None}
    mean = pytest.approx((3 * 0.1 - 0.3) / 4)
    assert mix.trial_figures(scores, found) == (mean, None)  # scalar: no capacity
    worst = objective_of(_study(workload=[CHAT, DOC], objective={"aggregate": "worst", **slo}))
    assert worst.trial_figures(scores, found)[0] == 0.1
    cap = objective_of(_study(workload=[CHAT, DOC], objective={"mode": "capacity", **slo}))
    assert cap.trial_figures(scores, found)[1] == pytest.approx(3.0)  # (3·4 + 0) / 4
    assert cap.score_constraints({"chat:p99_ttft_ms<=500": 0.2}, {"chat": 4.0, "doc": None}) == {
        "chat:p99_ttft_ms<=500": 0.2,
        "chat:capacity": 0.0,
        "doc:capacity": 1.0,
    }


def test_a_mix_in_words_names_each_scenario_and_the_aggregate() -> None:
    spec = _study(workload=[CHAT, DOC], objective={"aggregate": "worst", "slo": ["p99_ttft_ms<=9"]})
    lines = words_of(objective_of(spec)).workload_lines(
        spec.workload, lambda w: f"{w.random_input_len} in"
    )
    assert lines == [
        "workload: 2 scenarios, the score is the worst of theirs:",
        "  chat (weight 3): 1024 in; SLO p99_ttft_ms<=500",
        "  doc (weight 1): 4096 in",
    ]
    one = words_of(objective_of(_study()))
    assert one.workload_lines(spec.workload, str)[0].startswith("workload: ")


def test_a_runs_gain_in_each_modes_terms() -> None:
    scalar, cap = objective_of(_study()), CapacityObjective(ObjectiveSpec(mode="capacity"))
    ttft = {"p99_ttft_ms": 1000.0, "mean_tpot_ms": 50.0, "output_throughput": 400.0}
    faster = {**ttft, "p99_ttft_ms": 500.0}
    none = RunFigures({}, 0.0)  # no figure: an empty run, no capacity found
    assert scalar.run_gain(RunFigures(faster, 0.0), RunFigures(ttft, 0.0)) == pytest.approx(
        math.log(2)
    )
    assert scalar.run_gain(RunFigures(faster, 0.0), none) is None
    assert scalar.run_gain(none, RunFigures(ttft, 0.0)) == -math.inf
    assert cap.run_gain(RunFigures({}, 6.0), RunFigures({}, 3.0)) == pytest.approx(math.log(2))
    assert cap.run_gain(RunFigures({}, 6.0), none) is None
    assert cap.run_gain(none, RunFigures({}, 3.0)) == -math.inf
    assert (
        words_of(scalar).gain_figure(0.25) == "score -0.250"
        and words_of(cap).gain_figure(math.log(2)) == "capacity ×2.000"
    )
    assert scalar.rate_can_change([2.0]) and not scalar.rate_can_change([math.inf])
    assert (
        not cap.rate_can_change([2.0])
        and words_of(cap).fixed_rate()
        and not words_of(scalar).fixed_rate()
    )


def test_each_mode_scores_a_run_and_tells_optuna_its_values() -> None:
    """What `trial.scoring` asks the mode, never its name: a run's score against the
    reference's (metrics, or capacity), Optuna's values, the constraints on what was found."""
    slo = {"slo": ["p99_ttft_ms<=900"]}
    scalar = objective_of(_study())
    cap = objective_of(_study(objective={"mode": "capacity", **slo}))
    base = RunFigures(BASE, 3.0)
    faster = RunFigures({**BASE, "output_throughput": 800.0}, 6.0)
    expected = score(faster.metrics, BASE, scalar.spec.weights)
    assert expected < 0 and scalar.run_score(faster, base) == pytest.approx(expected)
    assert cap.run_score(faster, base) == pytest.approx(-math.log(2))
    none_found = RunFigures(BASE, 0.0)
    assert cap.run_score(none_found, base) == pytest.approx(-math.log(0.025 / 3.0))  # floor
    assert scalar.trial_values(-0.5, faster, base) == [pytest.approx(expected)]
    assert cap.trial_values(-0.5, faster, base) == [6.0]
    assert scalar.trial_figures({"": 0.0}, {"": 6.0}) == (0.0, None)
    assert cap.trial_figures({"": 0.0}, {"": 6.0}) == (0.0, 6.0)
    assert scalar.score_constraints({}, {"": 0.0}) == {}
    assert cap.score_constraints({}, {"": 0.0}) == {"capacity": 1.0}
    mix = objective_of(_study(workload=[CHAT, DOC], objective=slo))
    cap_mix = objective_of(_study(workload=[CHAT, DOC], objective={"mode": "capacity", **slo}))
    assert mix.trial_values(-0.5, faster, base) == [-0.5]  # the aggregated score
    # a capacity mix: the reference's capacity scaled by e^(−score); 0 when none was found
    assert cap_mix.trial_values(-math.log(2), faster, base) == [pytest.approx(6.0)]
    assert cap_mix.trial_values(-math.log(2), none_found, base) == [0.0]
    assert mix.trial_figures({"chat": 0.0}, {"chat": 4.0})[1] is None
    assert cap_mix.trial_figures({"chat": 0.0}, {"chat": 4.0})[1] == 4.0


def test_the_objective_object_keeps_decisions_only() -> None:
    """Issue 51: at most 20 public methods and boolean flags on the objective object (every
    kind: `MODES` and `MIXES`), its words apart (`tuner.measure.mode_words`, one per kind)."""
    kinds = [*MODES.values(), *MIXES.values()]
    asked = {
        name
        for kind in kinds
        for name in dir(kind)
        if not name.startswith("_")
        and (callable(getattr(kind, name)) or isinstance(getattr(kind, name), bool))
    }
    assert len(asked) <= 20, sorted(asked)
    assert not asked & {"rate_words", "gain_words", "workload_lines", "aggregate_words"}
    assert set(WORDS) == set(kinds)  # every kind has its words
