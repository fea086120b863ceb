"""Scores of capacity trials and of scenario mixes (`tuner.trial.scoring`,
`tuner.measure.objective`)."""

from __future__ import annotations

import math

import pytest

from tuner import trial as tr
from tuner.measure import objective as obj
from tuner.measure.measurement import Measurement
from tuner.measure.mixes import objective_of
from tuner.spec.study import StudySpec
from tuner.trial import TrialPoint
from tuner.trial.scoring import score_trial

BASE = {
    "name": "s",
    "engine": {"model": "m"},
    "search_space": {"parameters": {"max-num-seqs": {"type": "int", "low": 1, "high": 8}}},
}
CHAT = {"name": "chat", "weight": 3, "dataset_name": "random", "random_input_len": 256}
DOC = {"name": "doc", "weight": 1, "dataset_name": "random", "random_input_len": 4096}
WEIGHTS = {"p99_ttft_ms": 1.0}


def _spec(**kw) -> StudySpec:
    return StudySpec.model_validate({**BASE, **kw})


def _point(attrs: dict, number: int = 0) -> TrialPoint:
    metrics = {k: v for k, v in attrs.items() if tr.is_finite(v) and tr.is_metric(k)}
    return TrialPoint(number, "COMPLETE", {}, metrics, "feasible", attrs=attrs, baseline=True)


def test_aggregate_weighted_and_worst_case() -> None:
    scores, weights = {"chat": -0.2, "doc": 0.4}, {"chat": 3.0, "doc": 1.0}
    assert obj.aggregate(scores, weights, "weighted") == pytest.approx((3 * -0.2 + 0.4) / 4)
    assert obj.aggregate(scores, weights, "worst") == 0.4  # lower is better: the highest
    caps = {"chat": 12.0, "doc": 2.0}
    assert obj.aggregate_capacity(caps, weights, "weighted") == pytest.approx(9.5)
    assert obj.aggregate_capacity(caps, weights, "worst") == 2.0


def test_capacity_score_is_a_log_ratio_with_a_floor() -> None:
    assert obj.capacity_score(20.0, 10.0, 0.01) == pytest.approx(-math.log(2))
    assert obj.capacity_score(10.0, 10.0, 0.01) == 0.0
    assert obj.capacity_score(0.0, 10.0, 0.01) == pytest.approx(-math.log(0.001))
    assert obj.capacity_score(0.0, 0.0, 0.01) == 0.0


def _scenario_measurement(chat_ttft: float, doc_ttft: float) -> Measurement:
    return Measurement(
        metrics={"p99_ttft_ms": 1.0, "completed": 2.0},
        scenarios={
            "chat": tr.ScenarioEntry(3.0, {"p99_ttft_ms": chat_ttft}),
            "doc": tr.ScenarioEntry(1.0, {"p99_ttft_ms": doc_ttft}),
        },
    )


def _stored(scored) -> dict:
    """What the trial stores of a score (the attrs `TrialRecord` writes)."""
    return tr.TrialRecord(**scored.fields()).encode()


@pytest.mark.parametrize("how", ["weighted", "worst"])
def test_scenarios_are_scored_against_the_references_same_scenario(how: str) -> None:
    spec = _spec(
        workload=[{**CHAT, "slo": ["p99_ttft_ms<=150"]}, DOC],
        objective={"weights": WEIGHTS, "aggregate": how, "slo": ["p99_ttft_ms<=5000"]},
    )
    ref_m = _scenario_measurement(100.0, 1000.0)
    first = score_trial(spec, objective_of(spec), ref_m, None)
    assert first.score == 0.0 and first.values == [0.0]
    ref = _point({tr.SCENARIOS: _stored(first)[tr.SCENARIOS]})
    got = score_trial(
        spec, objective_of(spec), _scenario_measurement(200.0, 500.0), ref
    )  # chat 2× worse, doc 2× better
    chat, doc = math.log(2), -math.log(2)
    want = (3 * chat + doc) / 4 if how == "weighted" else chat
    assert got.score == pytest.approx(want) and got.values == [pytest.approx(want)]
    entries = _stored(got)[tr.SCENARIOS]
    assert entries["chat"][tr.SCORE] == pytest.approx(chat)
    assert entries["doc"][tr.SCORE] == pytest.approx(doc)
    # Per-scenario SLOs: chat's own (150 ms) is broken; the study's (5000 ms) holds for both.
    assert got.constraints["chat:p99_ttft_ms<=150"] > 0
    assert got.constraints["chat:p99_ttft_ms<=5000"] == 0
    assert got.constraints["doc:p99_ttft_ms<=5000"] == 0
    assert "doc:p99_ttft_ms<=150" not in got.constraints


def test_capacity_trial_scores_its_capacity_and_tells_optuna_the_rate() -> None:
    spec = _spec(
        workload={"request_rate": 4}, objective={"mode": "capacity", "slo": ["p99_ttft_ms<=900"]}
    )
    steps = [{"scenario": None, "rate_rps": 4.0, "feasible": True, "pruned_reason": None}]
    cap = tr.CapacityResult(capacity_rps=6.0, goodput_rps=5.5, resolved=True, capped=False)
    rate_steps = [tr.RateStep.decode(s) for s in steps]
    m = Measurement(metrics={"p99_ttft_ms": 800.0}, rate_steps=rate_steps, capacity=cap)
    ref = _point({tr.CAPACITY_RPS: 3.0})
    got = score_trial(spec, objective_of(spec), m, ref)
    assert got.values == [6.0] and got.score == pytest.approx(-math.log(2))
    stored = _stored(got)
    assert stored[tr.CAPACITY_RPS] == 6.0 and stored[tr.CAPACITY_GOODPUT] == 5.5
    assert stored[tr.RATE_STEPS] == steps and got.constraints == {"capacity": 0.0}
    assert stored[tr.CAPACITY]["capacity_rps"] == 6.0 and stored[tr.CAPACITY]["runs"] == 0
    none = score_trial(
        spec, objective_of(spec), Measurement(metrics={}, capacity=tr.CapacityResult(0.0)), ref
    )
    assert none.constraints == {"capacity": 1.0} and none.values == [0.0]
    assert objective_of(spec).directions() == {"capacity_rps": "maximize"}


def _capacity_mix(chat_rps: float, doc_rps: float) -> Measurement:
    def entry(rps: float) -> tr.ScenarioEntry:
        return tr.ScenarioEntry(1.0, {"p99_ttft_ms": 500.0}, capacity=tr.CapacityResult(rps))

    return Measurement(
        metrics={"p99_ttft_ms": 500.0}, scenarios={"chat": entry(chat_rps), "doc": entry(doc_rps)}
    )


@pytest.mark.parametrize("how", ["weighted", "worst"])
def test_a_capacity_mix_scores_each_scenario_not_the_mean_rate(how: str) -> None:
    """Issue 24 item 6: chat at 14 req/s no longer drowns a long-document scenario at 0.5 req/s.
    Before, −ln(mean capacity ratio) scored +8 % longdoc capacity −0.003."""
    spec = _spec(
        workload=[{**CHAT, "weight": 1}, {**DOC, "weight": 1}],
        objective={"mode": "capacity", "aggregate": how, "slo": ["p99_ttft_ms<=900"]},
    )
    base = score_trial(spec, objective_of(spec), _capacity_mix(14.0, 0.5), None)
    assert base.score == 0.0
    ref = _point(_stored(base))
    got = score_trial(
        spec, objective_of(spec), _capacity_mix(13.9, 0.54), ref
    )  # chat −0.7 %, doc +8 %
    chat, doc = -math.log(13.9 / 14.0), -math.log(0.54 / 0.5)
    want = (chat + doc) / 2 if how == "weighted" else chat
    assert got.score == pytest.approx(want)
    if how == "weighted":
        assert got.score < -0.03  # a clear gain, as the scenarios' own scores say
    assert got.scenarios["doc"].score == pytest.approx(doc)
    # the mix's capacity shown is still the mean (or lowest) rate
    assert got.capacity_rps == pytest.approx((13.9 + 0.54) / 2 if how == "weighted" else 0.54)
    # Optuna's value ranks as the score does
    worse = score_trial(spec, objective_of(spec), _capacity_mix(14.2, 0.45), ref)
    assert worse.score > got.score and worse.values[0] < got.values[0]
    assert base.values[0] == pytest.approx(ref.capacity_rps)
