"""The stored payloads: one encoder and one decoder each, and what earlier versions stored.

`data/previous_version_attrs.json` holds the Optuna attrs of three `tuner plan` studies (capacity
over two scenarios, scalar with an SLO, single-workload capacity) as the version before typed
payloads stored them (made with that version's `StudyLoop` and `PlanRunner`; spec dumps and
all but two trials left out, the owner and log path anonymised).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from tuner import trial as tr
from tuner.measure.runs import CapacityResult, RateStep
from tuner.trial.payloads import Constraints, RobustnessRecord

PREVIOUS = json.loads((Path(__file__).parent / "data" / "previous_version_attrs.json").read_text())


def _frozen(t: dict) -> SimpleNamespace:
    return SimpleNamespace(
        number=t["number"],
        state=SimpleNamespace(name=t["state"]),
        params=t["params"],
        values=t["values"],
        user_attrs=t["user_attrs"],
        system_attrs=t["system_attrs"],
    )


@pytest.mark.parametrize("study", sorted(PREVIOUS))
def test_every_stored_trial_decodes_and_encodes_back_unchanged(study: str) -> None:
    for t in PREVIOUS[study]["trials"]:
        record = tr.TrialRecord.decode(t["user_attrs"])
        assert record.encode() == t["user_attrs"]
        assert record.extra.keys() <= {
            "total_input_tokens",
            "total_output_tokens",
            "duration",
            "max_concurrent_requests",
            "max_output_tokens_per_s",
        }


def test_a_previous_capacity_study_reads_as_typed_fields() -> None:
    base, other = (tr.read(_frozen(t)) for t in PREVIOUS["capacity"]["trials"])
    assert base.baseline and base.feasible and other.record.reference_trial == base.number
    cap = base.record.capacity
    assert isinstance(cap, CapacityResult) and cap.capacity_rps == base.capacity_rps > 0
    assert cap.runs == len(base.rate_steps) and cap.resolved in (True, False)
    assert all(isinstance(s, RateStep) and s.scenario is None for s in base.rate_steps)
    assert all("p99_ttft_ms" in s.metrics for s in base.rate_steps)
    assert base.record.capacity_goodput_rps == cap.goodput_rps
    assert set(base.constraints.slos) == {"p99_ttft_ms<=2000"}
    assert (
        base.host == "vm"
        and base.spec_id == PREVIOUS["capacity"]["study_user_attrs"]["tuner_spec_id"]
    )


def test_a_previous_scenario_study_reads_each_scenario() -> None:
    base, other = (tr.read(_frozen(t)) for t in PREVIOUS["capacity_scenarios"]["trials"])
    assert base.scenario_names == ["chat", "doc"]
    chat = base.scenario("chat")
    assert chat is not None and chat.weight == 3.0 and chat.score == 0.0
    assert chat.capacity is not None and chat.capacity.capacity_rps > 0
    assert base.scenario_metrics("chat") == tr.payloads.metrics_of(chat.metrics)
    assert "p99_ttft_ms" in base.scenario_metrics("chat")
    assert "total_input_tokens" not in base.scenario_metrics("chat")  # a figure, not a metric
    assert {s.scenario for s in other.rate_steps} == {"chat", "doc"}
    slos = base.constraints.slos
    assert slos["chat:p99_ttft_ms<=3000"][0] == "chat"
    assert str(slos["doc:p99_ttft_ms<=2000"][1]) == "p99_ttft_ms<=2000"
    assert (
        base.record.scenarios["chat"].encode()
        == PREVIOUS["capacity_scenarios"]["trials"][0]["user_attrs"]["scenarios"]["chat"]
    )


def test_a_previous_study_record_reads_its_specs_and_label() -> None:
    attrs = PREVIOUS["scalar"]["study_user_attrs"]
    study = tr.StudyRecord.decode(attrs)
    assert study.simulated and study.spec_id == attrs["tuner_spec_id"]


def test_nulls_written_by_earlier_versions_read_as_absent() -> None:
    record = tr.TrialRecord.decode(
        {"failure_kind": "crashed", "failure_reason": None, "startup_s": None, "log_path": None}
    )
    assert record.startup_s is None and record.failure_reason is None
    assert record.encode() == {"failure_kind": "crashed"}


def test_constraints_are_told_apart_by_their_decoded_kind() -> None:
    named = Constraints.decode(
        {
            "constraints:measured": 0.0,
            "constraints:p99_ttft_ms<=5": 0.5,
            "constraints:chat:mean_tpot_ms<=80": 0.0,
            "constraints:chat:capacity": 0.0,
            "constraints": [0.0, 0.5, 0.0, 0.0],
        }
    )
    assert set(named.slos) == {"p99_ttft_ms<=5", "chat:mean_tpot_ms<=80"}
    assert named.broken == ["p99_ttft_ms<=5"] and named.any_broken and named.only_slos_broken
    assert dict(named) == {
        "measured": 0.0,
        "p99_ttft_ms<=5": 0.5,
        "chat:mean_tpot_ms<=80": 0.0,
        "chat:capacity": 0.0,
    }
    sick = Constraints.decode({"constraints:measured": 1.0, "constraints:p99_ttft_ms<=5": 0.0})
    assert not sick.only_slos_broken
    legacy = Constraints.decode({"constraints": [0.0, 0.25]})  # before named constraints
    assert dict(legacy) == {"0": 0.0, "1": 0.25} and legacy.broken == []
    assert legacy.any_broken and not legacy.only_slos_broken
    assert not Constraints.decode({"constraints:slo": 0.5}).slos  # not an SLO's key


def test_robustness_records_keep_their_stored_shape() -> None:
    record = RobustnessRecord("s1", True, "FRAGILE", 0.2, {"prompts +3%": -math.inf})
    stored = record.encode()
    assert stored == {
        "spec_id": "s1",
        "fragile": True,
        "verdict": "FRAGILE",
        "gain": 0.2,
        "gains": {"prompts +3%": None},  # JSON has no infinity
    }
    assert RobustnessRecord.decode(stored) == RobustnessRecord(
        "s1", True, "FRAGILE", 0.2, {"prompts +3%": None}
    )
    measured = RobustnessRecord("s1", None, "not checked", runs={})
    assert measured.measured and RobustnessRecord.decode(measured.encode()) == measured


def test_a_reused_result_copies_every_attr_including_unknown_ones() -> None:
    attrs = {"score": -0.1, "p99_ttft_ms": 9.0, "future_attr": {"x": 1}, "baseline": True}
    record = tr.TrialRecord.decode(attrs)
    assert record.extra == {"future_attr": {"x": 1}}
    assert record.encode() == attrs


def test_a_stored_figure_is_a_finite_real_number_in_python_and_in_pydantic() -> None:
    from pydantic import TypeAdapter, ValidationError

    from tuner.measure.stored import Finite, is_finite

    finite = TypeAdapter(Finite)
    for value in (True, False, "3.5", math.nan, math.inf, -math.inf, None, [1.0], 3, 2.5, -0.0):
        try:
            read: float | None = finite.validate_python(value)
        except ValidationError:
            read = None
        assert (read is not None) == is_finite(value), value
        assert read is None or read == value


def test_a_field_that_does_not_read_reads_as_its_default() -> None:
    from tuner.trial.payloads import ScreenInfo

    # the hand-written decoders raised on these (int("x"), int(nan))
    cap = CapacityResult.decode({"capacity_rps": True, "runs": "x", "goodput_rps": math.nan})
    assert cap == CapacityResult(capacity_rps=0.0, runs=0, goodput_rps=None)
    screen = ScreenInfo.decode({"candidates": math.nan, "drawn_factors": {"a": 1.5, "b": "x"}})
    assert screen is not None and screen.candidates == 0 and screen.drawn_factors == {"a": 1.5}
    assert CapacityResult.decode([{"capacity_rps": 1.0}]) is None  # not the payload's shape
    assert RateStep.decode({"feasible": True}) is None  # no rate: not a step
    steps = RateStep.decode_list([{"rate_rps": 2, "p99_ttft_ms": 5}, {"rate_rps": "2"}, 7])
    assert [(s.rate_rps, s.metrics) for s in steps] == [(2.0, {"p99_ttft_ms": 5.0})]


def test_a_payload_holds_what_a_reader_reads_back() -> None:
    record = RobustnessRecord("s1", None, "refused", gain=-math.inf, gains={"rate +10%": math.nan})
    assert record.gain is None and record.gains == {"rate +10%": None}  # JSON has no infinity
    assert record.encode()["gain"] is None
    assert RobustnessRecord.decode(record.encode()) == record
