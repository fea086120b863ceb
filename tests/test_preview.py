"""The plan preview of `tuner check` and `tuner init` (issue 46 §1): it agrees with the plan
it previews (a gain on the README's demo, "too few trials to tell" short of a whole plan), and
each cause of a night with nothing to win comes with its own remedy, never a loop of modes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tuner.fidelity.bands import Bands, range_text
from tuner.measure.mixes import objective_of
from tuner.run.planned import planned_trials
from tuner.scaffold.preview import Cause, _line, cause_of, preview
from tuner.spec.study import StudySpec, load_study_spec
from tuner.trial import TrialPoint, TrialRecord
from tuner_testing.cli import REPO

DEMO = REPO / "studies" / "demo-sim.yaml"
BASE_TPOT_MS = 100.0


def _point(
    number: int, tpot_ms: float, *, half_ms: float = 2.0, feasible: bool = True
) -> TrialPoint:
    """A planned trial scored on its mean TPOT alone against the defaults' (trial 0), with a
    95 % interval of ±`half_ms`; SLO-breaking ones have a p99 TTFT past the demo's 10 s."""
    ttft_ms = 3000.0 if feasible else 12000.0
    metrics = {"p99_ttft_ms": ttft_ms, "mean_tpot_ms": tpot_ms, "output_throughput": 90.0}
    record = TrialRecord(
        baseline=number == 0 or None,
        reference_trial=0,
        metrics=metrics,
        cis={"mean_tpot_ms": (tpot_ms - half_ms, tpot_ms + half_ms)},
    )
    return TrialPoint(
        number=number,
        state="COMPLETE",
        params={"max-num-seqs": 8 * (number + 1)},
        metrics=metrics,
        status="feasible" if feasible else "infeasible",
        score=math.log(tpot_ms / BASE_TPOT_MS),
        baseline=number == 0,
        attrs=record.encode(),
    )


def _capacity(spec: StudySpec) -> StudySpec:
    data = spec.model_dump(mode="json")
    data["objective"]["mode"] = "capacity"
    data["search"]["fidelity"] = "single"  # the screen scores latency, not capacity
    return StudySpec.model_validate(data)


# (the trials, whether they are a whole plan) -> the cause, and words its line must hold
CASES: dict[Cause, tuple[list[TrialPoint], bool, str]] = {
    "gain": ([_point(0, 100), _point(1, 80)], True, "predicted gain, trial 1"),
    "defaults-break-slo": (
        [_point(0, 100, feasible=False), _point(1, 90)],
        True,
        "vLLM's defaults break the SLO, trial 1 meets it",
    ),
    # no gain yet, short of a whole plan: never "nothing to win"
    "too-few-trials": ([_point(0, 100), _point(1, 99)], False, "too few trials to tell"),
    "slo-unreachable": (
        [_point(0, 100, feasible=False), _point(1, 90, feasible=False)],
        True,
        "against <= 10000): the night may find nothing that meets it; "
        "what would change it: a looser SLO (--slo)",
    ),
    # tuned configs break the SLO or are clearly worse, none beats the defaults
    "defaults-at-limit": (
        [_point(0, 100), _point(1, 130), _point(2, 101, feasible=False)],
        True,
        "vLLM's defaults are already the best config of the search space at this load",
    ),
    # the best tuned config scores better, within its interval: more prompts would tell
    "no-clear-difference": (
        [_point(0, 100), _point(1, 99), _point(2, 101)],
        True,
        "within the noise",
    ),
}


@pytest.mark.parametrize("cause", list(CASES))
def test_each_cause_is_told_with_its_own_remedy(cause: Cause) -> None:
    spec = load_study_spec(DEMO)
    points, whole, says = CASES[cause]
    assert cause_of(points, spec, objective_of(spec), whole=whole) == cause
    line = _line(cause, points, spec, objective_of(spec), "2 of 30", 1.0)
    assert line.startswith("plan preview (2 of 30 trials, SIMULATED, 1 s): ") and says in line
    remedy = {
        "slo-unreachable": "a lower rate (--rate)",  # not a tighter SLO, not a higher rate
        "defaults-at-limit": "a heavier load: a higher rate (--rate)",
        "no-clear-difference": "more prompts per trial (--num-prompts",
    }.get(cause)
    assert remedy is None or remedy in line, line
    assert ("nothing to win" in line) == (cause in ("defaults-at-limit", "no-clear-difference"))
    assert "tighter SLO" not in line


def test_the_nearest_config_s_figure_carries_its_band() -> None:
    """Every SIMULATED figure the preview names has its band (issue 45 item 4)."""
    spec = load_study_spec(DEMO)
    line = _line(
        "slo-unreachable", CASES["slo-unreachable"][0], spec, objective_of(spec), "2 of 30", 1.0
    )
    around = Bands.of_study(spec).around("p99_ttft_ms", 12000.0)
    assert around is not None and around[0] < 12000.0 < around[1]
    assert f"p99_ttft_ms 1.2e+04 ({range_text(around)}) against <= 10000)" in line, line


@pytest.mark.parametrize("cause", list(CASES))
def test_the_remedies_never_send_a_study_back_and_forth_between_modes(cause: Cause) -> None:
    """Scalar mode may be told to try capacity mode (a heavier load); capacity mode, whose
    search sets the load, is never told to try scalar mode (the old preview's loop)."""
    spec = _capacity(load_study_spec(DEMO))
    line = _line(cause, CASES[cause][0], spec, objective_of(spec), "2 of 30", 1.0)
    assert "--objective" not in line and "--rate" not in line, line


def test_a_night_shorter_than_the_whole_plan_is_said_apart_from_it() -> None:
    """The walk of issue 49/50: a longdoc capacity night of 4 trials previewed "2 of 30 trials
    ... `tuner plan --n-trials 30` runs the whole plan", the 30 read as the night's."""
    data = load_study_spec(DEMO).model_dump(mode="json")
    points = CASES["too-few-trials"][0]
    lines = []
    for n_trials in (4, 30):
        data["budget"]["n_trials"] = n_trials
        spec = StudySpec.model_validate(data)
        lines.append(_line("too-few-trials", points, spec, objective_of(spec), "2 of 30", 1.0))
    assert lines[0].endswith("runs the whole plan (the night itself runs 4 trials)"), lines
    assert lines[1].endswith("runs the whole plan"), lines  # a night of 30: nothing to add


def test_short_of_a_whole_plan_the_demo_is_too_early_to_tell() -> None:
    """A preview whose time is spent after its first trial (vLLM's defaults) says so."""
    found = preview(load_study_spec(DEMO), planned_trials, budget_s=0.0)
    assert found.cause == "too-few-trials" and found.gain is None and found.trials == 1
    assert "plan preview (1 of 30 trials, SIMULATED" in found.line
    assert "too few trials to tell" in found.line and "nothing to win" not in found.line


@pytest.mark.slow  # a dozen planned trials of the demo: ~3 s of CPU, more on a busy box
def test_the_preview_finds_the_gain_the_demos_plan_finds(tmp_path: Path) -> None:
    """The README's demo: a 30-trial `tuner plan` finds a config CLEARLY better than vLLM's
    defaults (mean TPOT -21 %, docs/preflight.md); the preview, the same trials, stops at the
    first such config instead of saying "nothing to win" after six."""
    found = preview(load_study_spec(DEMO), planned_trials)
    assert found.cause == "gain" and found.gain is True, found.line
    assert 6 < found.trials < 30 and "CLEARLY better than vLLM's defaults" in found.line


def test_a_study_that_sends_everything_at_once_is_not_told_to_raise_its_rate() -> None:
    """Every request at once (rate inf): a heavier load is more requests in flight."""
    spec = load_study_spec(DEMO)
    workload = spec.workload.model_copy(update={"request_rate": math.inf, "max_concurrency": 4})
    spec = spec.model_copy(update={"workload": workload})
    points, whole, _ = CASES["defaults-at-limit"]
    objective = objective_of(spec)
    cause = cause_of(points, spec, objective, whole=whole)
    line = _line(cause, points, spec, objective, "3 of 30", 1.0)
    assert "a heavier load: more requests in flight (workload.max_concurrency)" in line, line
    assert "--rate" not in line


def test_long_documents_that_share_prefixes_are_built_as_the_plan_builds_them() -> None:
    """Empty prompts of the documents' lengths hit no prefix cache: a study that asks each
    document several times would preview another workload than its plan's (a capacity of
    0.079 req/s against the plan's 0.54 for the shipped longdoc-shape study)."""
    from tuner.workload.lengths import length_only_requests

    plain = load_study_spec(DEMO).workload.model_copy(update={"dataset_name": "longdoc"})
    assert length_only_requests(plain) is not None
    shared = plain.model_copy(update={"longdoc_questions": [4]})
    assert shared.longdoc_shared and length_only_requests(shared) is None


def test_no_previews_help_states_the_previews_cost() -> None:
    """`--no-preview` said "(seconds)"; a longdoc capacity study's `init` waited 99 s of wall
    time (38 s of CPU) on a box loaded ~10 (the walk of issue 49/50). Its help states the CPU
    limit the preview keeps, and that a busy box takes longer."""
    from typing import get_args

    from tuner.commands.common import NoPreview
    from tuner.scaffold.preview import BUDGET_S

    text = get_args(NoPreview)[1].help
    assert f"{BUDGET_S:.0f} s of CPU" in text and "busy box" in text, text
