"""Prediction skips (issue 22 §2): the calibrated simulator rules a config out before launch,
with its margin; never the baseline or a queued config; off with a flag or a setting."""

from __future__ import annotations

import math
import os
import statistics
from pathlib import Path

import pytest

from tuner.fidelity import predict_skip as ps
from tuner.measure.mixes import objective_of
from tuner.results.views import trials_frame
from tuner.run.loop import StudyLoop
from tuner.runners.plan import PlanRunner
from tuner.sim.profile_file import load_gpu
from tuner.spec.study import StudySpec
from tuner.store.storage import Store
from tuner.trial import read_all
from tuner.workload.request import Workload

pytestmark = pytest.mark.slow  # whole studies: `make test`, not `make test-fast`

SPACE = {
    "parameters": {
        # 1 or 2 sequences at a time cannot keep up with 8 req/s of long answers
        "max-num-seqs": {"type": "int", "low": 1, "high": 256, "log": True},
        "max-num-batched-tokens": {"type": "int", "low": 1024, "high": 8192, "log": True},
    }
}
HOPELESS = {"max-num-seqs": 1, "max-num-batched-tokens": 8192}


def _spec(tiny_model_dir: Path, **pruning: object) -> StudySpec:
    return StudySpec.model_validate(
        {
            "name": "skip",
            "engine": {
                "model": "deepseek-r1-distill-qwen-32b",
                "flags": {"tensor-parallel-size": 4, "max-model-len": 8192},
            },
            "hardware": {"gpu": "a6000", "count": 4},
            "search_space": SPACE,
            "workload": {
                "tokenizer": str(tiny_model_dir),
                "num_prompts": 24,
                "random_input_len": 128,
                "random_output_len": 256,
                "request_rate": 8,
            },
            "objective": {"slo": ["p99_ttft_ms<=2000"]},
            "budget": {"n_trials": 12},
            "sampler": {"name": "tpe", "seed": 3},
            "pruning": {"enabled": False, **pruning},  # prediction skips alone
        }
    )


def _run(spec: StudySpec, tmp_path: Path, *, skip: bool = True, queue: bool = False):
    store = Store(f"sqlite:///{tmp_path}/{skip}-{queue}.db")
    loop = StudyLoop(spec, store, PlanRunner(spec), prediction_skip=skip)
    if queue:
        loop.study.enqueue_trial(HOPELESS)
    summary = loop.run()
    points = read_all(store.load_study("skip-simulated").get_trials())
    store.close()
    return summary, points


@pytest.fixture(scope="module")
def skipped(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    return _run(_spec(tiny_model_dir), tmp_path_factory.mktemp("skip"))


def test_hopeless_configs_are_ruled_out_with_prediction_and_margin(skipped) -> None:
    summary, points = skipped
    out = [p for p in points if p.record.ruled_out]
    assert out, "no config was ruled out"
    # nothing is ruled out before a launched trial calibrates the simulator
    assert not points[0].record.ruled_out and points[0].record.engine_s
    for p in out:
        sp = p.record.skip_prediction
        assert p.status == "pruned" and p.record.engine_s == 0.0
        assert p.record.pruned_reason.startswith("ruled out by prediction: predicted ")
        assert sp.margin["p99_ttft_ms"] > 0 and sp.engine_s > 0
        # ruled out only when even the margin in its favour leaves the SLO broken
        assert sp.metrics["p99_ttft_ms"] * math.exp(-sp.margin["p99_ttft_ms"]) > 2000
        if sp.errors_from < ps.MIN_ERRORS:  # too few misses measured: the stated margin
            assert sp.margin["p99_ttft_ms"] == pytest.approx(ps.CONSERVATIVE_MARGIN)
    launched = [p for p in points if not p.record.ruled_out and p.record.engine_s]
    assert launched and all(p.record.skip_prediction is not None for p in launched)
    assert summary.saved_by_prediction == len(out)
    assert summary.prediction_saved_s > 0
    rows = {r["number"]: r for r in trials_frame(points).to_dict("records")}
    assert all(rows[p.number]["state"] == "RULED OUT (predicted)" for p in out)
    assert all(rows[p.number]["saved_engine_s"] > 0 for p in out)


def test_turned_off_by_flag_or_setting(tiny_model_dir: Path, tmp_path: Path) -> None:
    for spec, skip in (
        (_spec(tiny_model_dir), False),  # --no-prediction-skip
        (_spec(tiny_model_dir, prediction_skip=False), True),  # pruning.prediction_skip
    ):
        (tmp_path / str(skip)).mkdir()
        summary, points = _run(spec, tmp_path / str(skip), skip=skip)
        assert summary.saved_by_prediction == 0
        assert all(p.record.skip_prediction is None for p in points)


def test_a_queued_config_is_launched_whatever_is_predicted(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    spec = _spec(tiny_model_dir)
    store = Store(f"sqlite:///{tmp_path}/q.db")
    loop = StudyLoop(spec, store, PlanRunner(spec))
    loop.run(n_trials=3)  # measured trials: the simulator is calibrated
    loop.study.enqueue_trial(HOPELESS)
    loop.run(n_trials=1)
    points = read_all(store.load_study("skip-simulated").get_trials())
    queued = next(p for p in points if p.params == HOPELESS and p.record.engine_s)
    sp = queued.record.skip_prediction
    assert not queued.record.ruled_out and sp is not None
    # predicted to break the SLO beyond its margin, and launched all the same; it did break it
    assert sp.metrics["p99_ttft_ms"] * math.exp(-sp.margin["p99_ttft_ms"]) > 2000
    assert queued.status == "infeasible"


def test_run_and_plan_take_no_prediction_skip(tmp_path: Path) -> None:
    from tuner_testing import tuner

    for command in ("run", "plan"):
        out = tuner(command, "--help", cwd=tmp_path, env={**os.environ, "COLUMNS": "200"})
        assert out.returncode == 0 and "--no-prediction-skip" in out.stdout


def test_the_score_is_trusted_to_5_percent_of_its_heaviest_metric(tiny_model_dir: Path) -> None:
    """A factor of 2 on every figure moves the score by Σ|w|·ln 2; 5 % on one figure by at
    most max|w|·0.05. The floor is the latter: Σ|w|·0.05 hid predictions measured to 0.005."""
    spec = _spec(tiny_model_dir)
    weights = {"p99_ttft_ms": 2.0, "mean_tpot_ms": 1.0, "output_throughput": 1.0}
    spec = spec.model_copy(
        update={"objective": spec.objective.model_copy(update={"weights": weights})}
    )
    skip = ps.PredictionSkip(spec, objective_of(spec), list)
    assert skip.score_scale == pytest.approx(4.0)
    assert skip.score_floor == pytest.approx(ps.MIN_MARGIN * 2.0)


BASE = {"max-num-seqs": 256, "max-num-batched-tokens": 2048}
MEASURED = {"p99_ttft_ms": 500.0, "mean_tpot_ms": 20.0, "output_throughput": 1000.0}


def _figures(scale: float, ttft: float = 1.0) -> dict[str, float]:
    """`MEASURED` as a profile `scale` times too slow sees it; P99 TTFT `ttft` times more."""
    m = MEASURED
    return {
        "p99_ttft_ms": m["p99_ttft_ms"] * scale * ttft,
        "mean_tpot_ms": m["mean_tpot_ms"] * scale,
        "output_throughput": m["output_throughput"] / scale,
    }


def _point(number: int, params: dict, metrics: dict, spec: StudySpec, **record: object):
    """A launched trial measured whole, scored as the study scores it against trial 0."""
    from tuner.trial import SkipPrediction, TrialPoint, TrialRecord
    from tuner.trial.scoring import judge

    score = judge(
        spec, objective_of(spec), metrics, None, {}, None if number == 0 else _BASE_POINT[0]
    ).score
    rec = TrialRecord(
        metrics=metrics,
        score=score,
        baseline=number == 0 or None,
        reference_trial=0,
        engine_s=100.0,
        skip_prediction=record.pop("skip_prediction", SkipPrediction(raw_score=-0.5)),
        **record,
    )
    point = TrialPoint.measured_as(number, params, rec)
    if number == 0:
        _BASE_POINT[:] = [point]
    return point


_BASE_POINT: list = []


def _skip(spec: StudySpec, simulated: dict) -> ps.PredictionSkip:
    """A predictor whose simulator gives `simulated[max-num-seqs]` (figures) per config, at
    any speed (so the speed fitted on the reference is 1: the profile as it is)."""
    from tuner.measure.measurement import Measurement

    skip = ps.PredictionSkip(spec, objective_of(spec), list)
    skip.simulate = lambda params, speed=1.0: Measurement(
        metrics=dict(simulated[params["max-num-seqs"]])
    )
    return skip


def test_a_profile_3x_off_rules_out_nothing_predicted_like_the_baseline(
    tiny_model_dir: Path,
) -> None:
    """Issue 32 §5: a profile 3× too slow used to rule out every config after the baseline,
    even one predicted identical to it (its raw score, against the *measured* baseline, was
    3·ln 3 worse; its raw P99 TTFT, 3× the measured, broke the SLO)."""
    spec = _spec(tiny_model_dir)
    limit_ms = 2000.0
    simulated = {256: _figures(3.0), 8: _figures(3.0), 4: _figures(3.0, ttft=3.0)}
    skip = _skip(spec, simulated)
    points = [_point(0, BASE, MEASURED, spec)]
    alike = skip.judge({**BASE, "max-num-seqs": 8}, points, None, may_skip=True)
    assert alike is not None and alike.ruled_out is None
    assert alike.score == pytest.approx(0.0)  # scored against the baseline's prediction
    assert alike.anchor["p99_ttft_ms"] == pytest.approx(-math.log(3.0))
    assert alike.metrics["p99_ttft_ms"] == pytest.approx(500.0)  # anchored on the baseline
    # predicted 3× the baseline's P99 TTFT: 1500 ms measured-scale, within the 2000 ms SLO
    slower = skip.judge({**BASE, "max-num-seqs": 4}, points, None, may_skip=True)
    assert slower is not None and slower.ruled_out is None
    assert slower.metrics["p99_ttft_ms"] == pytest.approx(1500.0)
    assert slower.metrics["p99_ttft_ms"] < limit_ms
    # a truly hopeless one still goes: 40× the baseline's prediction, 20 s against 2 s, is
    # over the limit by more than the margin (a factor of 2, widened by the baseline's 3×)
    simulated[1] = _figures(3.0, ttft=40.0)
    hopeless = skip.judge({**BASE, "max-num-seqs": 1}, points, None, may_skip=True)
    assert hopeless is not None and hopeless.ruled_out is not None


def test_until_misses_are_measured_the_stated_margin_grows_by_the_reference_miss(
    tiny_model_dir: Path,
) -> None:
    """A profile 3× off has misjudged this engine's scale; it may misjudge its load too: the
    factor-of-2 margin widens by the reference's own miss until 3 misses measure one."""
    spec = _spec(tiny_model_dir)
    skip = _skip(spec, {256: _figures(3.0), 8: _figures(3.0)})
    p = skip.predict({**BASE, "max-num-seqs": 8}, [_point(0, BASE, MEASURED, spec)], None)
    assert p is not None and p.errors_from == 0
    assert p.margin["p99_ttft_ms"] == pytest.approx(ps.CONSERVATIVE_MARGIN + math.log(3.0))
    assert p.margin[ps.SCORE] == pytest.approx(3 * (ps.CONSERVATIVE_MARGIN + math.log(3.0)))


def test_the_margin_is_never_narrower_than_a_miss_seen(tiny_model_dir: Path) -> None:
    """One launched trial whose P99 TTFT the relative prediction missed by 4× (beyond the
    stated factor 2, and 2 misses are too few to measure a margin): the margin covers it."""
    spec = _spec(tiny_model_dir)
    skip = _skip(spec, {256: MEASURED, 8: MEASURED, 16: MEASURED})
    missed = {**MEASURED, "p99_ttft_ms": 2000.0}
    points = [
        _point(0, BASE, MEASURED, spec),
        _point(1, {**BASE, "max-num-seqs": 8}, missed, spec),
    ]
    p = skip.predict({**BASE, "max-num-seqs": 16}, points, None)
    assert p is not None and p.errors_from == 1
    assert p.margin["p99_ttft_ms"] == pytest.approx(ps.SAFETY * math.log(4.0))


def test_misses_are_rescored_under_todays_weights(tiny_model_dir: Path) -> None:
    """After a weights change the measured scores are re-judged; the predictions' stored
    scores were judged under the old weights. Compared as stored, every miss was the change
    of weights, and the margin grew past any use; re-scored, an exact simulator misses 0."""
    spec = _spec(tiny_model_dir)
    weights = {"p99_ttft_ms": 3.0, "mean_tpot_ms": 0.5, "output_throughput": 1.0}
    spec = spec.model_copy(
        update={"objective": spec.objective.model_copy(update={"weights": weights})}
    )
    configs = {256: (1.0, 1.0), 8: (1.3, 0.9), 16: (1.1, 1.2), 32: (0.8, 1.1), 64: (1.2, 0.7)}
    simulated = {
        n: {**_figures(2.0, ttft=t), "mean_tpot_ms": 40.0 * tpot}
        for n, (t, tpot) in configs.items()
    }
    measured = {
        n: {**_figures(1.0, ttft=t), "mean_tpot_ms": 20.0 * tpot}
        for n, (t, tpot) in configs.items()
    }
    skip = _skip(spec, simulated)
    points = [
        _point(i, {**BASE, "max-num-seqs": n}, measured[n], spec)
        for i, n in enumerate((256, 8, 16, 32))
    ]  # each stored raw_score (-0.5) is what another judging gave
    misses = skip.misses(points)
    assert len(misses) == 3 and all(e[ps.SCORE] == pytest.approx(0.0) for e in misses)
    p = skip.predict({**BASE, "max-num-seqs": 64}, points, None)
    assert p is not None and p.errors_from == 3
    assert p.margin[ps.SCORE] == pytest.approx(skip.score_floor)


def test_configs_predicted_alike_are_one_miss_and_few_misses_a_wide_margin(
    tiny_model_dir: Path,
) -> None:
    spec = _spec(tiny_model_dir)
    skip = _skip(spec, {256: MEASURED, 8: MEASURED, 16: MEASURED, 32: MEASURED})
    slower = {**MEASURED, "p99_ttft_ms": 600.0}
    points = [
        _point(0, BASE, MEASURED, spec),
        *(_point(i, {**BASE, "max-num-seqs": n}, slower, spec) for i, n in ((1, 8), (2, 16))),
        _point(3, {**BASE, "max-num-seqs": 32}, {**MEASURED, "p99_ttft_ms": 450.0}, spec),
    ]
    misses = skip.misses(points)
    assert len(misses) == 1  # three identical predictions: one piece of evidence
    assert misses[0]["p99_ttft_ms"] == pytest.approx(
        statistics.fmean([math.log(1.2)] * 2 + [math.log(0.9)])
    )
    # the same spread of misses, from 3 and from 17 distinct predictions: the bound from 3 is
    # the wider (the largest of 3 says less about the next miss)
    few = [0.30, 0.32, 0.34]
    many = [0.30, 0.32, 0.34] * 5 + [0.31, 0.33]
    assert ps._margin(few, 0.32) > ps._margin(many, 0.32) > ps.SAFETY * 0.02


def _truth_faster(
    spec: StudySpec, factor: float, shape: dict | None = None, workload: Workload | None = None
) -> PlanRunner:
    """The 'real engine': the simulator on the study's profile with every constant `factor`
    times faster, and each of `shape`'s constants moved by its factor too (the study is told
    neither; benchmarks/night_saving.py `--truth-faster`)."""
    from tuner.sim.fit import apply_factors, speed_factors

    runner = PlanRunner(spec, workload=workload)
    moved = {k: f * (shape or {}).get(k, 1.0) for k, f in speed_factors(factor).items()}
    runner.gpu = apply_factors(load_gpu("a6000"), moved)
    return runner


@pytest.mark.parametrize("factor", [3.0])
def test_a_study_on_an_engine_3x_faster_than_its_profile_finds_what_no_skip_finds(
    tiny_model_dir: Path, tmp_path: Path, factor: float
) -> None:
    """Issue 32 §5, whole study: the engine is `factor`× faster than the study's profile.
    Skips used to rule out every config after the baseline (nothing more launched, `best`
    the defaults); now the study launches configs after the baseline and finds the same best
    as with `--no-prediction-skip`."""
    from tuner.runners.trial_runner import TrialContext
    from tuner.trial import best
    from tuner.trial.scoring import score_trial

    spec = _spec(tiny_model_dir)
    found, false = {}, []
    for skip in (True, False):
        store = Store(f"sqlite:///{tmp_path}/{skip}.db")
        truth = _truth_faster(spec, factor)
        StudyLoop(spec, store, truth, prediction_skip=skip).run()
        points = read_all(store.load_study("skip-simulated").get_trials())
        store.close()
        launched = [p for p in points if p.record.engine_s and not p.baseline]
        found[skip] = (len(launched), best(points).score)
        for p in (
            q for q in points if q.record.ruled_out
        ):  # its full run on the truth: would it have won?
            m = truth.measure(TrialContext(spec.name, p.number, p.params, lambda s: None))
            full = score_trial(spec, truth.objective, m, points[0]).score
            ok = m.metrics["p99_ttft_ms"] <= 2000
            false += [p.number] if ok and full < best(points[: p.number]).score else []
    assert found[True][0] >= 3, found  # configs after the baseline were launched
    assert found[True][1] == pytest.approx(found[False][1]), found
    assert not false, f"ruled out, and would have beaten the best: trials {false}"


def test_a_multi_fidelity_budget_counts_real_trials_not_ruled_out_ones(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Issue 37 §4: a multi-fidelity study's budget is its few real trials. The screen's
    choices are queued (never ruled out); when it finds nothing new the sampler proposes, and
    a proposal ruled out on a prediction used to count as one of the trials: a real trial
    lost. Now every counted trial is launched."""

    class Engine(PlanRunner):  # a real engine to the loop (the screen runs), the truth 2× faster
        planned = False
        simulated = False

    data = _spec(tiny_model_dir).model_dump()
    data |= {"budget": {"n_trials": 6}, "search": {"fidelity": "multi", "candidates": 16}}
    spec = StudySpec.model_validate(data)
    engine = Engine(spec)
    engine.gpu = _truth_faster(spec, 2.0).gpu
    store = Store(f"sqlite:///{tmp_path}/mf.db")
    loop = StudyLoop(spec, store, engine)
    assert loop.screen is not None
    loop.screen.choose = lambda points, host=None: None  # nothing new: the sampler proposes
    loop.run()
    points = read_all(store.load_study("skip").get_trials())
    store.close()
    out = [p for p in points if p.record.ruled_out]
    launched = [p for p in points if p.record.engine_s]
    assert out, "nothing was ruled out: the test shows nothing"
    assert len(launched) == spec.budget.n_trials
    assert loop.budget_used() == (spec.budget.n_trials, 0)


def _seed_shape_study(tiny_model_dir: Path) -> tuple[StudySpec, list]:
    """The seed's shape (benchmarks/night_saving.py `seed`: long prompts of varied length,
    long answers, at a rate the profile's engine only just keeps up with), with requests
    made here by length (the planner reads nothing else), so no tokenizer runs."""
    import random

    from tuner.workload.request import BenchRequest

    spec = StudySpec.model_validate(
        {
            **_spec(tiny_model_dir).model_dump(),
            "workload": {
                "tokenizer": str(tiny_model_dir),
                "num_prompts": 48,
                "random_input_len": 3000,
                "random_output_len": 512,
                "request_rate": 1.5,
            },
            "objective": {"slo": ["p99_ttft_ms<=8000"]},
        }
    )
    draw = random.Random(1)
    requests = [BenchRequest("", draw.randint(300, 5700), 512) for _ in range(48)]
    return spec, requests


def test_a_config_that_queues_only_on_a_slow_profile_is_not_ruled_out(
    tiny_model_dir: Path,
) -> None:
    """Issue 32 §5, the false skip of `night_saving.py --truth-faster 2` (seed 1), made
    small: the engine 2× faster than its profile (and off in shape: `TRUTH`'s bandwidth and
    overheads). Three configs that queue on neither measure close to their relative
    predictions, so the margin is narrow; 32 sequences queue on the profile's slower engine,
    not on the truth, and the profile's relative prediction (+1.36 ± 0.19) ruled it out,
    though on the truth it beats every trial so far. Predicted on the profile re-scaled to
    the speed the baseline measured, it queues as the truth does: launched."""
    from tuner.runners.trial_runner import TrialContext
    from tuner.trial import SkipPrediction, TrialPoint, TrialRecord, best
    from tuner.trial.scoring import score_trial

    spec, requests = _seed_shape_study(tiny_model_dir)
    shape = {"bandwidth": 0.85, "step_overhead": 1.3, "per_seq_overhead": 1.2}  # its TRUTH
    truth = _truth_faster(spec, 2.0, shape, Workload(tuple(requests)))

    def cfg(seqs: int, tokens: int, memory: float) -> dict:
        return {
            "max-num-seqs": seqs,
            "max-num-batched-tokens": tokens,
            "gpu-memory-utilization": memory,
        }

    def measured(params: dict, points: list) -> tuple[TrialPoint, float]:
        m = truth.measure(TrialContext(spec.name, len(points), params, lambda s: None))
        scored = score_trial(spec, truth.objective, m, points[0] if points else None)
        record = TrialRecord(
            metrics=dict(m.metrics or {}),
            **scored.fields(),
            baseline=not points or None,
            reference_trial=0,
            engine_s=m.engine_s,
            skip_prediction=SkipPrediction(),
        )
        return TrialPoint.measured_as(len(points), params, record), scored.score

    points: list = []
    for params in (
        cfg(256, 2048, 0.92),
        cfg(304, 2333, 0.92),
        cfg(128, 1800, 0.8),
        cfg(64, 2600, 0.9),
    ):
        points.append(measured(params, points)[0])
    queues = cfg(32, 1259, 0.75)
    on_truth = measured(queues, points)[1]
    assert on_truth < best(points).score  # a rule-out would be false
    as_profiled = ps.PredictionSkip(spec, objective_of(spec), lambda: requests)
    as_profiled.speed = lambda ref: ps.STOCK  # the profile as it is: the false skip
    old = as_profiled.judge(queues, points, None, may_skip=True)
    assert old is not None and old.errors_from >= ps.MIN_ERRORS and old.ruled_out is not None
    skip = ps.PredictionSkip(spec, objective_of(spec), lambda: requests)
    p = skip.judge(queues, points, None, may_skip=True)
    assert p is not None and p.ruled_out is None
    assert p.speed is not None and 1.6 <= p.speed <= 2.2  # the baseline's 2×, less TRUTH's
    assert p.score is not None and abs(p.score - on_truth) <= p.margin[ps.SCORE]


def test_the_speed_fitted_is_the_one_that_reproduces_the_reference() -> None:
    """`engine_speed.fitted_speed`: a reference whose figures the profile predicts 2.5×
    too slow is reproduced at 2.5× (to its 2 %); one the simulator refuses leaves the
    profile as it is."""
    from tuner.fidelity.engine_speed import fitted_speed

    def misses_at(speed: float) -> dict[str, float]:  # latencies ∝ 1/speed, rate ∝ speed
        return {"p99_ttft_ms": math.log(speed / 2.5), "output_throughput": math.log(2.5 / speed)}

    assert fitted_speed(misses_at) == pytest.approx(2.5, rel=0.02)
    assert fitted_speed(lambda speed: None) == 1.0
