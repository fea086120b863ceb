"""The multi-fidelity screen (`tuner.fidelity.screen`): candidates, prediction, the rank rule."""

from __future__ import annotations

import math
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from tuner import trial as tr
from tuner.fidelity.screen import Screen
from tuner.fidelity.unit_cube import from_unit as _from_unit
from tuner.fidelity.unit_cube import to_unit as _to_unit
from tuner.measure.objective import score
from tuner.run.pipeline import params_key
from tuner.sim.fit_problem import apply_factors
from tuner.spec.space import baseline_params, distributions
from tuner.spec.study import load_study_spec
from tuner.trial import TrialPoint
from tuner_testing import REPO


def _spec(tmp_path: Path, **search):
    data = yaml.safe_load((REPO / "studies" / "demo-sim.yaml").read_text())
    data["search_space"] = str(REPO / "search_spaces" / "vllm-core.yaml")
    data["workload"].update(num_prompts=24)
    data["search"] = {"fidelity": "multi", "candidates": 40, **search}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_study_spec(path)


def _requests(spec):
    w = spec.workload
    return [
        SimpleNamespace(prompt_len=w.random_input_len + 7 * i, output_len=w.random_output_len)
        for i in range(w.num_prompts)
    ]


def _point(number: int, params: dict, metrics: dict, score: float, **attrs) -> TrialPoint:
    return TrialPoint(
        number=number,
        state="COMPLETE",
        params=params,
        metrics=metrics,
        status="feasible",
        score=score,
        baseline=number == 0,
        attrs={tr.SCORE: score, **attrs},
    )


def test_unit_cube_round_trips_every_kind_of_parameter(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    for name, d in distributions(spec.search_space).items():
        for x in (0.0, 0.13, 0.5, 0.77, 0.999):
            value = _from_unit(d, x)
            assert spec.search_space.parameters[name].contains(value), (name, value)
            assert _from_unit(d, _to_unit(d, value)) == value, (name, value)
    step = _from_unit(distributions(spec.search_space)["gpu-memory-utilization"], 0.33)
    assert round(step * 100) == pytest.approx(step * 100)  # on the 0.01 grid


def test_choose_predicts_a_new_config_and_records_its_prediction(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    screen = Screen(spec, _requests(spec))
    base = baseline_params(spec.search_space)
    predicted = screen.predict(base)
    assert predicted is not None and set(predicted) >= {"p99_ttft_ms", "mean_tpot_ms"}
    points = [_point(0, base, predicted, 0.0)]
    t0 = time.perf_counter()
    choice = screen.choose(points)
    choose_s = time.perf_counter() - t0
    assert choice is not None
    assert params_key(choice.params) != params_key(base)
    assert choice.attrs["predicted_p99_ttft_ms"] == choice.metrics["p99_ttft_ms"]
    assert choice.attrs[tr.PREDICTED_SCORE] == choice.score
    info = choice.attrs[tr.SCREEN]
    # the distinct untried candidates were predicted, in a time within the call's own
    assert info["candidates"] == spec.search.candidates
    assert 1 <= info["screened"] <= spec.search.candidates, info
    assert info["screen_s"] > 0 and info["calibrate_s"] + info["screen_s"] <= choose_s + 2e-4
    # the screen's own figures: its rank (a lower confidence bound on the score) is no worse
    # than the predicted baseline's (score 0 at distance 0); the exploration bonus may pick a
    # far config whose predicted score alone is a little worse
    assert info["rank"] <= 1e-9
    assert info["rank"] == pytest.approx(
        choice.score - spec.search.exploration * info["score_error"] * info["distance"]
    )


def test_greedy_rank_takes_the_best_predicted_and_exploration_moves_away(
    tmp_path: Path,
) -> None:
    greedy = Screen(_spec(tmp_path, exploration=0.0), _requests(_spec(tmp_path)), seed=3)
    base = baseline_params(greedy.spec.search_space)
    points = [_point(0, base, greedy.predict(base), 0.0)]
    chosen = greedy.choose(points)
    assert chosen is not None and chosen.attrs[tr.SCREEN]["rank"] == pytest.approx(chosen.score)
    bold = Screen(_spec(tmp_path, exploration=50.0), _requests(_spec(tmp_path)), seed=3)
    far = bold.choose(points)
    assert far is not None
    # a huge exploration weight ranks by distance from the real trials: farther than greedy
    assert far.attrs[tr.SCREEN]["distance"] >= chosen.attrs[tr.SCREEN]["distance"]


def test_prediction_error_is_measured_over_predicted() -> None:
    predicted = {"p99_ttft_ms": 100.0, "output_throughput": 50.0}
    attrs = tr.TrialRecord(predicted_metrics=predicted, predicted_score=-0.2).encode()
    assert attrs == {
        "predicted_p99_ttft_ms": 100.0,
        "predicted_output_throughput": 50.0,
        "predicted_score": -0.2,
    }  # the stored keys
    decoded = tr.TrialRecord.decode(attrs)
    assert decoded.predicted_metrics == predicted and decoded.metrics == {}
    assert not tr.is_metric("predicted_p99_ttft_ms")  # never read as a measurement
    measured = {"p99_ttft_ms": 110.0, "output_throughput": 40.0}
    miss = tr.prediction_error(predicted, -0.2, measured, 0.1)
    assert miss == pytest.approx({"p99_ttft_ms": 0.1, "output_throughput": -0.2, "score": 0.3})
    assert tr.prediction_error({}, None, {"p99_ttft_ms": 1.0}, 0.0) is None


def test_the_fit_reports_its_posterior_wide_where_one_trial_cannot_tell(tmp_path: Path) -> None:
    """The calibration's covariance of the log-factors (Laplace): from the baseline alone the
    compute roofline is pinned (a prefill-heavy trial) and the per-request overhead is left
    as wide as the loop's prior says, a factor of 2 per standard deviation."""
    spec = _spec(tmp_path)
    screen = Screen(spec, _requests(spec))
    base = baseline_params(spec.search_space)
    screen.calibrate([_point(0, base, screen.predict(base), 0.0)])
    c = screen.calibration
    sd = dict(zip(c.factors, np.sqrt(np.diag(c.covariance)), strict=True))
    assert sd["request_overhead"] == pytest.approx(math.log(2.0), rel=0.1)
    assert sd["flops"] < 0.5 * sd["request_overhead"], sd


def test_after_its_first_pick_the_screen_ranks_on_a_draw_from_the_posterior(
    tmp_path: Path,
) -> None:
    """Thompson draws: each later pick is the best config under constants drawn from the
    calibration's posterior, so what the trials cannot tell apart is explored, and what the
    trial records is still the calibrated profile's own prediction."""
    spec = _spec(tmp_path, candidates=12)
    screen = Screen(spec, _requests(spec), seed=7)
    base = baseline_params(spec.search_space)
    points = [_point(0, base, screen.predict(base), 0.0)]
    first = screen.choose(points)
    assert first is not None and first.info.drawn_factors == {}  # the fit's own constants
    points.append(_point(1, first.params, first.metrics, first.score, **first.attrs))
    later = screen.choose(points)
    assert later is not None
    drawn = later.info.drawn_factors
    assert set(drawn) == set(screen.calibration.factors) and drawn != screen.calibration.factors
    assert later.attrs[tr.SCREEN]["drawn_factors"] == drawn  # stored, and read back
    assert tr.ScreenInfo.decode(later.attrs[tr.SCREEN]) == later.info
    # ranked on the drawn profile: its rank is the draw's score less the exploration bonus
    gpu = apply_factors(screen.base, drawn)
    weights = spec.objective.weights
    on_draw = score(screen.predict(later.params, gpu), screen.predict(base, gpu), weights)
    bonus = spec.search.exploration * later.info.score_error * later.info.distance
    assert later.info.rank == pytest.approx(on_draw - bonus)
    # recorded: the calibrated profile's prediction (what `prediction_error` measures)
    assert later.metrics == screen.predict(later.params)
    assert later.score == pytest.approx(score(later.metrics, screen.predict(base), weights))
    # draws spread along the unidentified factor, and barely along the identified one
    logs = np.log([list(screen.draw(points).values()) for _ in range(200)])
    sd = dict(zip(drawn, logs.std(axis=0), strict=True))
    assert sd["request_overhead"] > 0.4 and sd["flops"] < 0.5 * sd["request_overhead"], sd
    # every other screened trial after the first ranks on the fitted profile again
    points.append(_point(2, later.params, later.metrics, later.score, **later.attrs))
    assert screen.draw(points) == {}
    points.append(_point(3, later.params, later.metrics, later.score, **later.attrs))
    assert screen.draw(points) != {}


def test_the_screen_searches_the_simulator_to_the_bounds_random_points_miss(
    tmp_path: Path,
) -> None:
    """A coordinate search on the simulator from the best candidate: an optimum on the floor
    of two parameters at once (where `mixed-2x`'s is) is found, not only approached."""
    spec = _spec(tmp_path, exploration=0.0, candidates=60)
    screen = Screen(spec, _requests(spec), seed=1)
    screen.calibrate = lambda points: screen.calibration  # the surface below is the simulator
    names = screen.names

    def predict(params, profile=None):
        u = screen.to_unit(params)
        slow = 1.0 + u[names.index("max-num-batched-tokens")] + u[names.index("max-num-seqs")]
        return {"p99_ttft_ms": 1e3 * slow, "mean_tpot_ms": 50 * slow, "output_throughput": 9 / slow}

    screen.predict = predict
    base = baseline_params(spec.search_space)
    points = [_point(0, base, predict(base), 0.0)]
    first = screen.choose(points)  # the first screened trial: Sobol and local points only
    assert first is not None
    assert (first.params["max-num-batched-tokens"], first.params["max-num-seqs"]) != (1024, 8)
    points.append(_point(1, first.params, first.metrics, first.score, **first.attrs))
    choice = screen.choose(points)
    assert choice is not None and choice.info.screened <= spec.search.candidates
    assert (choice.params["max-num-batched-tokens"], choice.params["max-num-seqs"]) == (1024, 8)
