"""The band on every simulated figure (`tuner.fidelity.bands`; docs/simulator.md, "The band on every
prediction"): the regime of a workload's shape, the family of a metric, the table's bands,
their narrowing on a study's own residuals, and `m_band` beside each SIMULATED figure in
`tuner pareto --simulated --format json` and `tuner trials --simulated --format json`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from results_fixtures import build_study
from typer.testing import CliRunner

from tuner.cli import app
from tuner.fidelity.bands import (
    MIN_RESIDUALS,
    PUBLISHED_BANDS,
    Bands,
    band_text,
    family,
    range_text,
    regime,
    with_bands,
    workload_regime,
)
from tuner.spec.workload import WorkloadSpec

INF = math.inf
SHAPES = [  # (request_rate, max_concurrency, prompt_tokens, num_prompts), regime
    ((INF, None, 1024, 100), "burst"),
    ((4.0, None, 1024, 100), "poisson"),
    ((INF, 8, 1024, 100), "closed_loop"),
    ((4.0, 1, 1024, 100), "light"),
    ((4.0, None, 9, 1), "light"),
    ((INF, 1, 32000, 100), "long_context"),  # a long prompt decides, whatever the arrivals
    ((4.0, None, 16383, 100), "poisson"),
]


@pytest.mark.parametrize(("shape", "expected"), SHAPES)
def test_regime_of_a_workload_shape(shape: tuple, expected: str) -> None:
    rate, concurrency, prompt, prompts = shape
    found = regime(
        request_rate=rate, max_concurrency=concurrency, prompt_tokens=prompt, num_prompts=prompts
    )
    assert found == expected


def test_regime_of_a_study_workload() -> None:
    assert workload_regime(WorkloadSpec()) == "burst"  # random 1024 tokens, rate inf
    assert workload_regime(WorkloadSpec(request_rate=2.0)) == "poisson"
    assert workload_regime(WorkloadSpec(random_input_len=20000, request_rate=2.0)) == (
        "long_context"
    )
    # longdoc's default mix (512 .. 32768) averages 10.8k tokens: not long context
    assert workload_regime(WorkloadSpec(dataset_name="longdoc")) == "burst"
    only_long = WorkloadSpec(dataset_name="longdoc", longdoc_lengths=[32768])
    assert workload_regime(only_long) == "long_context"
    chat = WorkloadSpec(dataset_name="sharegpt", dataset_path="x.json", max_concurrency=4)
    assert workload_regime(chat) == "closed_loop"


def test_families_of_vllm_bench_keys() -> None:
    assert family("output_throughput") == family("capacity_rps") == "throughput"
    assert family("request_goodput") == "throughput"
    assert family("p99_ttft_ms") == family("mean_ttft_ms") == "ttft"
    assert family("mean_tpot_ms") == family("p99_itl_ms") == "tpot"
    assert family("completed") is None and family("score") is None
    bands = Bands(("burst",))
    e2el, ttft, tpot = (bands.ratio(m) for m in ("p99_e2el_ms", "p99_ttft_ms", "mean_tpot_ms"))
    assert e2el is not None and ttft is not None and tpot is not None
    assert (e2el.low, e2el.high) == (min(ttft.low, tpot.low), max(ttft.high, tpot.high))
    assert bands.ratio("completed") is None and bands.around("completed", 3.0) is None
    # the bench's duration: the throughput's band inverted (served faster, done sooner)
    assert bands.ratio("duration") == bands.family_band("throughput").inverse()


def test_every_table_band_holds_the_figure_itself() -> None:
    assert set(PUBLISHED_BANDS) == {"light", "closed_loop", "poisson", "burst", "long_context"}
    for fams in PUBLISHED_BANDS.values():
        assert set(fams) == {"throughput", "ttft", "tpot"}
        for low, high in fams.values():
            assert 0 < low <= 1.0 <= high


def test_a_band_around_a_figure_and_in_words() -> None:
    bands = Bands(("closed_loop",))
    low, high = PUBLISHED_BANDS["closed_loop"]["throughput"]
    assert bands.around("output_throughput", 100.0) == pytest.approx((100 * low, 100 * high))
    assert bands.text("capacity_rps", 0.82, "req/s") == band_text(
        0.82, (0.82 * low, 0.82 * high), "req/s"
    )
    assert band_text(0.82, (0.61, 1.05), "req/s") == "0.82 req/s (0.61-1.05, SIMULATED)"
    assert band_text(0.82, None, "req/s") == "0.82 req/s (SIMULATED)"
    # a duration scales inversely with the throughput: its band is the inverse
    inverse = bands.family_band("throughput").inverse()
    assert (inverse.low, inverse.high) == pytest.approx((1 / high, 1 / low))
    # a study with two scenarios: the hull of both regimes' bands
    both = Bands(("burst", "long_context")).family_band("ttft")
    burst, long_ = PUBLISHED_BANDS["burst"]["ttft"], PUBLISHED_BANDS["long_context"]["ttft"]
    assert (both.low, both.high) == (min(burst[0], long_[0]), max(burst[1], long_[1]))


def test_the_band_narrows_on_the_studys_own_residuals() -> None:
    bands = Bands(("closed_loop",))
    table = bands.family_band("ttft")
    residuals = {"p99_ttft_ms": [0.97, 1.02, 1.05, 0.99, 1.01, 1.03, 0.98, 1.04, 1.0]}
    assert len(residuals["p99_ttft_ms"]) == MIN_RESIDUALS
    narrowed = bands.narrowed(residuals, "tuner calibrate").family_band("ttft")
    assert (narrowed.low, narrowed.high) == (0.97, 1.05)  # their spread, never narrower
    assert table.high - table.low > narrowed.high - narrowed.low
    assert "9 trials' residuals" in narrowed.source
    words = bands.narrowed(residuals, "tuner calibrate").words()
    assert "TTFT ×0.97-1.05 (tuner calibrate: 9 trials' residuals)" in words
    # the table (benchmarks/sim_bands.py on the committed cross-validated run)
    tpot = range_text(PUBLISHED_BANDS["closed_loop"]["tpot"])
    assert bands.words().endswith(f"TPOT ×{tpot} (published GPU runs, closed loop)")
    # families without residuals keep the table; too few residuals change nothing
    assert bands.narrowed(residuals, "x").family_band("tpot") == bands.family_band("tpot")
    few = {"p99_ttft_ms": residuals["p99_ttft_ms"][:-1]}
    assert bands.narrowed(few, "x").family_band("ttft") == table
    # a study's residuals wider than the table's widen it: the band says what they show
    wide = {"mean_tpot_ms": [0.5, *[1.0] * (MIN_RESIDUALS - 2), 1.9]}
    widened = bands.narrowed(wide, "x").family_band("tpot")
    assert (widened.low, widened.high) == (0.5, 1.9)


def _simulated_study(tmp_path: Path) -> tuple[str, str]:
    study_file, url = build_study(tmp_path, simulated=True)
    return str(study_file), url


def test_pareto_and_trials_json_carry_a_band_beside_each_simulated_figure(
    tmp_path: Path,
) -> None:
    study_file, url = _simulated_study(tmp_path)
    runner = CliRunner()
    done = runner.invoke(
        app, ["pareto", study_file, "--storage", url, "--simulated", "--format", "json"]
    )
    assert done.exit_code == 0, done.output
    rows = json.loads(done.stdout)
    assert rows
    for row in rows:
        figures = {k: v for k, v in row["metrics"].items() if not k.endswith("_band")}
        banded = [m for m in figures if family(m) is not None or m == "duration"]
        assert "duration" in banded and "p99_ttft_ms" in banded
        for m in banded:
            low, high = row["metrics"][f"{m}_band"]
            assert low <= figures[m] <= high and low < high
    done = runner.invoke(
        app, ["trials", study_file, "--storage", url, "--simulated", "--format", "json"]
    )
    assert done.exit_code == 0, done.output
    rows = json.loads(done.stdout)
    figured = [r for r in rows if r.get("p99_ttft_ms") is not None]
    assert figured
    for row in figured:
        low, high = row["p99_ttft_ms_band"]
        assert low <= row["p99_ttft_ms"] <= high


def test_measured_figures_carry_no_band() -> None:
    measured = {"p99_ttft_ms": 900.0, "completed": 10}
    assert with_bands(measured, None) == measured
    banded = with_bands(measured, Bands(("burst",)))
    assert list(banded) == ["p99_ttft_ms", "p99_ttft_ms_band", "completed"]


def test_printed_lines_carry_the_band() -> None:
    """The night's cost, `tuner init`'s rate note and `tuner verify`'s prediction, each
    SIMULATED figure with its band."""
    from tuner.run.cost import NightCost
    from tuner.scaffold.rate import RateChoice
    from tuner.spec.slo import SloLimit
    from tuner.verify.predict import TrafficPrediction

    cost = NightCost(30, 5100.0, "the simulator's baseline trial", None, True,
                     trial_band_s=(4400.0, 6100.0))  # fmt: skip
    line = cost.line()
    assert "30 trial(s) × ~85 min = 42.5 h of engine time (36.7 h-50.8 h, SIMULATED, " in line
    assert "(36.7" not in NightCost(30, 5100.0, "trials", None).line()  # measured: no band

    bands = Bands(("poisson",))
    limit = SloLimit("p99_ttft_ms", "<=", 600.0)
    choice = RateChoice(0.3, 1.05, {"p99_ttft_ms": 437.2}, (limit,), bands, "1.05 req/s (x)")
    around = bands.around("p99_ttft_ms", 437.2)
    assert around is not None
    why = choice.why()
    assert f"SIMULATED: p99 TTFT 437.2 ms ({range_text(around)}); they sustain 1.05" in why

    residuals = {"p99_ttft_ms": [0.9, 1.1, *[1.0] * (MIN_RESIDUALS - 2)]}
    narrowed = bands.narrowed(residuals, "this study's calibration")
    predicted = TrafficPrediction(
        {"p99_ttft_ms": 1000.0}, {"p99_ttft_ms": 800.0}, (0, 1), bands=narrowed
    )
    lines = predicted.lines(["p99_ttft_ms"], {})
    assert "this study's calibration: 9 trials' residuals" in lines[0]
    assert lines[1] == (
        "  p99_ttft_ms: SIMULATED 1000 (900-1100) on your traffic vs SIMULATED 800 (720-880) "
        "on the study's workload (+25.0 %)"
    )
    stored = predicted.as_json()["your_traffic"]
    assert stored == {"p99_ttft_ms": 1000.0, "p99_ttft_ms_band": [900.0, 1100.0]}


def test_a_calibration_s_held_out_residuals_narrow_the_band(monkeypatch) -> None:
    """`Trust.residuals`: measured / held-out prediction of each trial the fit used, matched
    by trial number; from `MIN_RESIDUALS` trials the family's band is theirs."""
    from tuner.fidelity.calibration import Trust
    from tuner.sim.fit import Calibration
    from tuner.sim.fit_problem import Observation
    from tuner.sim.profiles import GPUS

    n = MIN_RESIDUALS + 1
    seen = [Observation({}, {"p99_ttft_ms": 100.0 + i, "completed": 8}, trial=i) for i in range(n)]
    monkeypatch.setattr(Trust, "observations", lambda self: seen)
    cal = Calibration(
        GPUS["a6000"],
        held_out_predictions=tuple({"p99_ttft_ms": 104.0} for _ in seen),
        trials=tuple(range(n)),
        folds=n,
    )
    residuals = Trust(None, []).residuals(cal)  # type: ignore[arg-type]
    assert residuals == {"p99_ttft_ms": [(100.0 + i) / 104.0 for i in range(n)]}
    bands = Bands(("poisson",))
    narrowed = bands.narrowed(residuals, "this study's calibration").family_band("ttft")
    assert (narrowed.low, narrowed.high) == (100.0 / 104.0, 109.0 / 104.0)
    table = bands.family_band("ttft")
    assert narrowed.high - narrowed.low < table.high - table.low
    # one trial: nothing held out, nothing narrows
    alone = Calibration(GPUS["a6000"], held_out_predictions=({},), trials=(0,), folds=0)
    assert Trust(None, []).residuals(alone) == {}  # type: ignore[arg-type]


def test_a_measured_study_s_screen_predictions_carry_their_band() -> None:
    """`tuner trials --format json` of a measured study: the screen's SIMULATED
    `predicted_<m>` with its band, narrowed by the study's own prediction misses (measured /
    predicted of the trials screened before they ran); the measured figures carry none."""
    from tuner.fidelity.bands import prediction_residuals, with_predicted_bands

    errors = [{"p99_ttft_ms": e, "score": 0.3} for e in (-0.05, 0.1, *[0.0] * 7)] + [None]
    residuals = prediction_residuals(errors)
    assert residuals == {"p99_ttft_ms": pytest.approx([0.95, 1.1, *[1.0] * 7])}  # no score
    bands = Bands(("burst",)).narrowed(residuals, "this study's screen")
    row = {"p99_ttft_ms": 900.0, "predicted_p99_ttft_ms": 1000.0, "predicted_score": 0.2}
    banded = with_predicted_bands(row, bands)
    assert list(banded) == [
        "p99_ttft_ms",
        "predicted_p99_ttft_ms",
        "predicted_p99_ttft_ms_band",
        "predicted_score",
    ]
    assert banded["predicted_p99_ttft_ms_band"] == pytest.approx([950.0, 1100.0])
    # fewer than MIN_RESIDUALS misses: the published table's band
    few = Bands(("burst",)).narrowed(prediction_residuals(errors[:3]), "x")
    low, high = PUBLISHED_BANDS["burst"]["ttft"]
    wide = with_predicted_bands(row, few)["predicted_p99_ttft_ms_band"]
    assert wide == pytest.approx([1000.0 * low, 1000.0 * high])
    assert with_predicted_bands({"p99_ttft_ms": 900.0}, bands) == {"p99_ttft_ms": 900.0}
