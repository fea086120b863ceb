"""`tuner best`'s plain word on how sure it is: clearly better than the baseline, and than the
runner-up, by the 95 % confidence intervals of the weighted headline metrics
(`objective.clearly_better`), or it says so."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest
import yaml

from tuner import trial as tr
from tuner.results.best import best_report
from tuner.spec.study import StudySpec, load_study_spec
from tuner_testing import REPO

NOT_BASELINE = (
    "NOT clearly better than the baseline (trial 0): no weighted metric gained 5% or more"
)
NOT_RUNNER_UP = "not clearly better than the runner-up (trial {n}): re-measure both"
BASELINE_BEST = "the baseline (vLLM's defaults) is the best trial: no tuned config beat it"

# (p99 TTFT ms, mean TPOT ms, output tok/s) intervals; lower, lower, higher is better
BASE = ((90.0, 110.0), (9.0, 11.0), (90.0, 110.0))
OVERLAPS_BASE = ((80.0, 95.0), (8.5, 9.5), (105.0, 120.0))  # better, but overlapping
FASTER_TTFT = ((50.0, 60.0), (8.5, 9.5), (105.0, 120.0))  # clear on p99 TTFT only
MORE_OUTPUT = ((80.0, 95.0), (8.5, 9.5), (130.0, 140.0))  # clear on throughput only


def _spec(tmp_path: Path, **weights: float) -> StudySpec:
    data = yaml.safe_load((REPO / "studies" / "demo-sim.yaml").read_text())
    data["search_space"] = str(REPO / "search_spaces" / "vllm-core.yaml")
    data.setdefault("objective", {})["weights"] = {
        "p99_ttft_ms": 1.0,
        "mean_tpot_ms": 1.0,
        "output_throughput": 1.0,
        **weights,
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_study_spec(path)


def _trial(
    number: int, score: float, cis: tuple, baseline: bool = False
) -> optuna.trial.FrozenTrial:
    """A measured, feasible trial as the tuner stores it: score, figures and their CIs."""
    attrs: dict = {tr.SCORE: score, tr.BASELINE: baseline}
    for metric, (lo, hi) in zip(
        ("p99_ttft_ms", "mean_tpot_ms", "output_throughput"), cis, strict=True
    ):
        attrs[metric] = (lo + hi) / 2
        attrs[metric + tr.CI_SUFFIX] = [lo, hi]
    dist = optuna.distributions.IntDistribution(1, 1024, log=True)
    trial = optuna.trial.create_trial(
        params={"max-num-seqs": 64 * (number + 1)},
        distributions={"max-num-seqs": dist},
        value=score,
        user_attrs=attrs,
    )
    trial.number = number
    return trial


def _best(spec: StudySpec, *trials: optuna.trial.FrozenTrial) -> list[str]:
    report = best_report(
        tr.read_all(trials), "demo", tr.StudyRecord(spec=spec.model_dump(mode="json"))
    )
    return [line.removeprefix("# ") for line in report.splitlines() if line.startswith("# ")]


def test_clearly_better_than_both_says_nothing_more(tmp_path: Path) -> None:
    lines = _best(
        _spec(tmp_path),
        _trial(0, 0.0, BASE, baseline=True),
        _trial(1, -0.5, FASTER_TTFT),
        _trial(2, -0.2, OVERLAPS_BASE),  # runner-up: FASTER_TTFT's p99 lies wholly below
    )
    assert lines[0].startswith("best trial 1 of study demo")
    assert not [line for line in lines if "clearly better" in line or "best trial:" in line]
    # ... but says, positively, that the gain is clear and on what (issue 34)
    assert (
        "CLEARLY better than vLLM's defaults (baseline trial 0) on p99 TTFT: the 95% confidence "
        "interval of the difference lies wholly on the better side" in lines
    )


def test_overlapping_the_baseline_everywhere_is_not_clearly_better(tmp_path: Path) -> None:
    lines = _best(
        _spec(tmp_path),
        _trial(0, 0.0, BASE, baseline=True),
        _trial(1, -0.3, OVERLAPS_BASE),
    )
    assert lines[0].startswith("best trial 1 of study demo")
    assert NOT_BASELINE in "\n".join(lines)
    # the baseline is also the runner-up here: said once, not again as the runner-up
    assert NOT_RUNNER_UP.format(n=0) not in "\n".join(lines)


def test_clear_of_the_baseline_but_not_of_the_runner_up(tmp_path: Path) -> None:
    lines = "\n".join(
        _best(
            _spec(tmp_path),
            _trial(0, 0.0, BASE, baseline=True),
            _trial(1, -0.5, FASTER_TTFT),
            _trial(2, -0.4, FASTER_TTFT),  # same intervals: the order may be luck
        )
    )
    assert "best trial 1 of study demo" in lines
    assert NOT_BASELINE not in lines
    assert NOT_RUNNER_UP.format(n=2) in lines


@pytest.mark.parametrize(
    ("clear", "weights", "clearly"),
    [
        (FASTER_TTFT, {}, True),
        (FASTER_TTFT, {"p99_ttft_ms": 0.0}, False),  # clear only where the objective looks away
        (MORE_OUTPUT, {}, True),  # higher is better for throughput: lo above the other's hi
        (MORE_OUTPUT, {"output_throughput": 0.0}, False),
    ],
    ids=["ttft", "ttft-unweighted", "throughput", "throughput-unweighted"],
)
def test_only_weighted_metrics_count_and_each_in_its_direction(
    tmp_path: Path, clear: tuple, weights: dict, clearly: bool
) -> None:
    lines = "\n".join(
        _best(
            _spec(tmp_path, **weights), _trial(0, 0.0, BASE, baseline=True), _trial(1, -0.5, clear)
        )
    )
    assert (NOT_BASELINE not in lines) is clearly, lines
    assert NOT_RUNNER_UP.format(n=0) not in lines, lines  # the baseline's line says it


@pytest.mark.parametrize(
    ("tuned", "holds"),
    [
        # within the noise of the defaults: no candidate is clearly better than them
        (
            OVERLAPS_BASE,
            "no tuned config is clearly better than the defaults (the best, trial 1: no "
            "weighted metric gained 5% or more with the 95% confidence interval of its "
            "difference clear of no gain): keep them",
        ),
        # the defaults' p99 TTFT (90-110) lies wholly below the tuned one's
        (
            ((150.0, 170.0), (9.0, 11.0), (90.0, 110.0)),
            "the defaults are CLEARLY better than the best tuned config (trial 1) on p99 TTFT: "
            "keep them",
        ),
        # better on one metric only, worse on the score
        (
            MORE_OUTPUT,
            "the best tuned config (trial 1) is clearly better on output only, and worse on the "
            "study's objective: keep the defaults",
        ),
    ],
)
def test_the_baseline_as_best_is_said_in_words(tmp_path: Path, tuned: tuple, holds: str) -> None:
    """When vLLM's defaults are the best trial, `best` says what holds against the best tuned
    config, never "not clearly better than the runner-up" (the defaults are not a candidate
    to re-measure: `export` exits 3, nothing to ship)."""
    lines = "\n".join(
        _best(
            _spec(tmp_path),
            _trial(0, 0.0, BASE, baseline=True),
            _trial(1, 0.4, tuned),
        )
    )
    assert "best trial 0 of study demo" in lines
    assert f"{BASELINE_BEST}; {holds}" in lines, lines
    assert NOT_BASELINE not in lines  # not compared with itself
    assert "runner-up" not in lines and "DOUBT" not in lines, lines


def _rerun(number: int, of: int, score: float, cis: tuple) -> optuna.trial.FrozenTrial:
    """A `--confirm` re-run of trial `of`, with the same parameters."""
    trial = _trial(of, score, cis)
    trial.number = number
    trial.set_user_attr(tr.CONFIRM_OF, of)
    return trial


@pytest.mark.parametrize(
    ("best_again", "runner_up_again", "verdict"),
    [
        (-0.20, -0.19, "over their --confirm repeats"),  # gap within the repeats' noise
        (-0.21, -0.05, None),  # repeats set them clearly apart
    ],
)
def test_after_confirm_the_repeats_decide_the_runner_up_verdict(
    tmp_path: Path, best_again: float, runner_up_again: float, verdict: str | None
) -> None:
    """Issue 21: once `--confirm` re-measured both configs, the verdict on the runner-up uses
    their pooled repeats and never asks for `--confirm` again."""
    spec = _spec(tmp_path)
    lines = _best(
        spec,
        _trial(0, 0.0, BASE, baseline=True),
        _trial(1, -0.20, FASTER_TTFT),
        _trial(2, -0.18, FASTER_TTFT),  # one run each: the intervals overlap
        _rerun(3, 1, best_again, FASTER_TTFT),
        _rerun(4, 2, runner_up_again, FASTER_TTFT),
        _rerun(5, 1, best_again + 0.01, FASTER_TTFT),
        _rerun(6, 2, runner_up_again - 0.01, FASTER_TTFT),
    )
    text = "\n".join(lines)
    assert "re-measure both" not in text, text
    if verdict is None:
        assert "not clearly better than the runner-up" not in text, text
    else:
        assert verdict in text and "(trial 2)" in text, text


def test_capacity_mode_judges_the_capacity_by_the_search_resolution(tmp_path: Path) -> None:
    """In capacity mode the figures were measured at each config's own rate: their intervals
    do not compare. The capacity does, beyond the search's resolution (5 % here)."""
    data = yaml.safe_load(
        (REPO / "studies" / "a6000x4-r1-distill-qwen-32b-longdoc.yaml").read_text()
    )
    data["search_space"] = str(REPO / "search_spaces" / "vllm-core.yaml")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    spec = load_study_spec(tmp_path / "c.yaml")

    def at(number: int, rps: float, baseline: bool = False) -> optuna.trial.FrozenTrial:
        trial = _trial(number, -math.log(rps / 0.10), OVERLAPS_BASE if number else BASE, baseline)
        trial.set_user_attr(tr.CAPACITY_RPS, rps)
        return trial

    clear = "\n".join(_best(spec, at(0, 0.10, baseline=True), at(1, 0.11), at(2, 0.09)))
    assert "NOT clearly better than the baseline" not in clear  # +10 %: beyond 5 %
    assert "not clearly better than the runner-up" not in clear
    close = "\n".join(_best(spec, at(0, 0.10, baseline=True), at(1, 0.103)))
    assert (
        "NOT clearly better than the baseline (trial 0): stored without intervals, the "
        "capacities differ by no more than the capacity search's resolution (5%)" in close
    )  # not "the capacities' intervals overlap (stored without intervals: ...)", both at once

    # With the capacities' 95 % intervals, they decide: +10 % whose interval reaches below
    # the rate where the baseline broke the SLOs for sure is not clearly better; +3 % whose
    # low end is at or above it is.
    def within(number: int, rps: float, low: float, high: float) -> optuna.trial.FrozenTrial:
        trial = at(number, rps, baseline=number == 0)
        found = tr.CapacityResult(rps, capacity_rps_low=low, capacity_rps_high=high)
        trial.set_user_attr(tr.CAPACITY, found.encode())
        return trial

    base = within(0, 0.10, 0.095, 0.106)
    wide = "\n".join(_best(spec, base, within(1, 0.11, 0.1, 0.13)))
    assert (
        "NOT clearly better than the baseline (trial 0): the capacities' intervals overlap" in wide
    )
    assert "stored without intervals" not in wide  # both have theirs: that case alone
    assert "0.11 req/s (0.1-0.13)" in wide  # the capacity with its interval
    sure = "\n".join(_best(spec, base, within(1, 0.103, 0.106, 0.12)))
    assert "CLEARLY better than vLLM's defaults" in sure, sure
    assert "held the SLOs for sure at a rate where the other broke them" in sure


def test_the_baseline_alone_within_the_slos_is_not_said_to_have_beaten_anything(
    tmp_path: Path,
) -> None:
    """Every tuned config refused, ruled out or breaking an SLO: `best` said "no tuned config
    beat it" when none was there to compare."""
    infeasible = _trial(1, -0.4, OVERLAPS_BASE)
    infeasible.system_attrs["constraints:p99_ttft_ms<=10000"] = 1.0
    lines = "\n".join(_best(_spec(tmp_path), _trial(0, 0.0, BASE, baseline=True), infeasible))
    assert "best trial 0 of study demo" in lines
    assert (
        "the baseline (vLLM's defaults) is the only config measured within the SLOs: no tuned "
        "config to compare it with (`tuner trials` says why each is not)" in lines
    ), lines
    assert BASELINE_BEST not in lines
