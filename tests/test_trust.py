"""The simulator's trust (`tuner.fidelity.calibration.Trust`): one choice of the measured
trials that are evidence, for the screen, the prediction skip, the plan notes and `tuner
calibrate`, and one figure of a profile's miss (`tuner.sim.fit.median_errors`)."""

from __future__ import annotations

import statistics
from pathlib import Path

from tuner.fidelity.calibration import Trust
from tuner.runners.plan import study_profile, study_workload
from tuner.sim.fit import FIT_METRICS, predict
from tuner.sim.profiles import load_model
from tuner.spec.study import StudySpec, load_study_spec
from tuner.trial import ENGINE_S, PARTIAL, PLANNED_VERSION, VLLM_VERSION, TrialPoint
from tuner.workload.lengths import length_only_requests
from tuner_testing import sim_study

REAL = {VLLM_VERSION: "0.11.0"}


def _point(number: int, score: float, ttft_ms: float = 100.0, **attrs: object) -> TrialPoint:
    return TrialPoint(
        number=number,
        state="COMPLETE",
        params={"max-num-seqs": 8 * (number + 1)},
        metrics={"p99_ttft_ms": ttft_ms, "mean_tpot_ms": 30.0, "output_throughput": 500.0},
        status="feasible",
        score=score,
        attrs=attrs,
    )


def _spec(tmp_path: Path, tiny_model_dir: Path) -> StudySpec:
    return load_study_spec(sim_study(tmp_path, tiny_model_dir, workload={"num_prompts": 8}))


def test_each_asker_takes_its_evidence_from_one_place(tmp_path: Path, tiny_model_dir: Path) -> None:
    points = [
        _point(0, 0.0, **REAL, **{ENGINE_S: 100.0}),
        _point(1, -0.2, **{VLLM_VERSION: PLANNED_VERSION}),  # `tuner plan`'s virtual time
        _point(2, -0.1, **REAL, **{ENGINE_S: 300.0}),
        _point(3, -0.5, **REAL, **{ENGINE_S: 50.0, PARTIAL: True}),  # stopped early
        _point(4, -0.9, **REAL, reused_from=2),  # another trial's result, not launched
    ]
    trust = Trust(_spec(tmp_path, tiny_model_dir), points)
    assert [p.number for p in trust.whole()] == [0, 1, 2]  # the screen fits these
    assert [p.number for p in trust.launched()] == [0, 2]  # the skip's misses
    assert trust.engine_s() == 200.0  # what a launch is expected to take (their median)
    assert [o.trial for o in trust.observations()] == [0, 2]  # calibrate's, the plan notes'
    assert [o.trial for o in trust.best_observations(2)] == [1, 2]  # best first
    assert trust.observation(points[2]).flags["max-num-seqs"] == 24


def test_the_plan_notes_figure_is_the_median_miss_of_the_profile_as_it_is(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """`profile_errors`: the median of |predicted / measured − 1| per headline figure, on the
    study's profile before any fit; the requests are asked only when there is evidence."""
    spec = _spec(tmp_path, tiny_model_dir)
    asked: list[int] = []

    def requests() -> list:
        asked.append(1)
        return length_only_requests(spec.workload) or []

    planned = [_point(1, 0.0, **{VLLM_VERSION: PLANNED_VERSION})]
    assert Trust(spec, planned).profile_errors(requests) == {} and not asked
    points = [_point(n, 0.0, ttft, **REAL) for n, ttft in enumerate((50.0, 400.0, 90.0, 120.0))]
    errors = Trust(spec, points).profile_errors(requests)
    workload = study_workload(spec, requests())
    model, gpu = load_model(spec.engine.model), study_profile(spec)
    by_hand = {m: [] for m in FIT_METRICS}  # the plan notes' own loop before the shared one
    for p in points:
        predicted = predict(model, gpu, Trust(spec, points).observation(p).flags, workload)
        assert predicted is not None
        for m in FIT_METRICS:
            by_hand[m].append(abs(predicted[m] / p.metrics[m] - 1.0))
    assert errors == {m: statistics.median(v) for m, v in by_hand.items()}
    assert set(errors) == set(FIT_METRICS) and errors["p99_ttft_ms"] > 0
