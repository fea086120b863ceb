"""The smallest change that keeps the gain (issue 34, item 2): of the flags the best config
changes, recommend only those whose revert to vLLM's default loses the gain."""

from __future__ import annotations

from typing import Any

from tuner.fidelity.smallest import changed_flags, reverted, smallest_change
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
        "--max-num-batched-tokens 4096;"
    )
    assert (
        "dropped --block-size 32 → 16: reverting it changes the SIMULATED score by +0.001, "
        "within noise" in lines
    )
    assert "SIMULATED score of the command: -0.200 (with every flag: -0.201)" in lines
