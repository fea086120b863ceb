"""The HTML report and its figures, on a hand-built study in a real SQLite file."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path

import pytest
from results_fixtures import build_study, frozen

from tuner.measure.mixes import objective_of
from tuner.results.report import plots as report_plots
from tuner.results.report.front import SloLine, pareto_front_info
from tuner.results.report.page import build_report, trials_table
from tuner.results.report.plots import history_figure, importances, plot_pareto
from tuner.results.report.png import write_png
from tuner.spec.figures import PARTIAL_NOTE
from tuner.store.storage import Store, spec_of
from tuner.trial import read as trial_point


def _load(url: str, name: str = "handbuilt"):
    store = Store(url)
    study = store.load_study(name)
    points = [trial_point(t) for t in study.get_trials()]
    return store, study, spec_of(study), points


@pytest.fixture
def stored(tmp_path: Path):
    _, url = build_study(tmp_path)
    store, study, spec, points = _load(url)
    yield study, spec, points
    store.close()


def test_pareto_figure_marks_front_baseline_infeasible_and_failed(stored) -> None:
    _, spec, points = stored
    fig = plot_pareto(pareto_front_info(points, spec.objective.slo))
    traces = {t.name.split(" (")[0]: t for t in fig.data}
    front = traces["Pareto front"]
    # the step line joins the trade-offs the intervals tell apart: 2 measured as 1 did, so it
    # is within noise of 1 (a pale ring), not a trade-off of its own
    assert list(front.x) == [900.0, 1500.0, 1800.0] and list(front.y) == [75, 70, 50]
    assert "4 trials; 3 told apart by their 95% intervals" in front.name
    feasible = traces["feasible trial"]
    assert list(feasible.marker.color) == [1000.0, 1200.0, 1100.0, 1300.0, 900.0]  # throughput
    rings = list(feasible.marker.line.color)
    assert rings[2] == report_plots.COLORS["noise"] and rings[1] == report_plots.COLORS["front"]
    assert report_plots.NOISE_WORDS in traces
    # the 95 % intervals as error bars: trial 0's P99 TTFT 1500 ms in [1350, 1650]
    assert feasible.error_x.arrayminus[0] == pytest.approx(150)
    assert feasible.error_x.array[0] == pytest.approx(150)
    assert feasible.error_y.array[3] == pytest.approx(5)  # trial 6's 50 ms in [45, 55]
    assert any(
        unescape(name).startswith("grey bars: each trial's 95% intervals") for name in traces
    )
    assert list(feasible.text) == ["0", "1,2", "", "6", "7"]  # tied trials share a label
    assert list(traces["infeasible"].x) == [2500.0]
    assert "baseline" in traces and list(traces["baseline"].x) == [1500.0]
    notes = [a.text for a in fig.layout.annotations]
    assert any("#4 kv_cache_too_small" in n and "#5 interrupted" in n for n in notes)
    assert any("SLO p99_ttft_ms<=2000" in n for n in notes)
    assert any("SLO mean_tpot_ms<=80" in n for n in notes)


def test_the_pareto_data_is_computed_once_for_both_renderers(stored) -> None:
    _, spec, points = stored
    info = pareto_front_info(points, spec.objective.slo)
    assert (info.x, info.y) == ("p99_ttft_ms", "mean_tpot_ms")
    assert [p.number for p in info.front] == [1, 2, 0, 6]
    assert [p.number for p in info.feasible] == [0, 1, 2, 6, 7]
    assert info.feasible_labels == ("0", "1,2", "", "6", "7")
    assert [p.number for p in info.infeasible] == [3] and info.infeasible_labels == ("3",)
    assert [p.number for p in info.baselines] == [0]
    assert [p.number for p in info.failed] == [4, 5]
    assert info.slo_lines == (
        SloLine("x", 2000.0, "SLO p99_ttft_ms<=2000"),
        SloLine("y", 80.0, "SLO mean_tpot_ms<=80"),
    )
    assert not info.log_x and not info.log_y and not info.simulated


def test_history_leaves_failed_trials_out_and_tracks_best_feasible(stored) -> None:
    _, _, points = stored
    fig = history_figure(points)
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["feasible trial"].x) == [0, 1, 2, 6, 7]
    assert list(by_name["infeasible trial"].x) == [3]
    assert list(by_name["best so far"].y) == [0.0, -0.3, -0.3, -0.3, -0.4, -0.4]
    assert fig.layout.xaxis.dtick == 1  # whole trial numbers (plotly's own: 0.2, 0.4 …)
    assert history_figure(points[:2]).layout.xaxis.dtick == 1


def test_importance_needs_enough_measured_trials(stored, monkeypatch) -> None:
    study, _, points = stored  # 6 measured trials (0, 1, 2, 3, 6, 7)
    few = importances(study, points)
    assert few == (
        "Too few measured trials to rank parameters by importance: 6 measured, "
        f"at least {report_plots.MIN_MEASURED_TRIALS_FOR_IMPORTANCE} needed."
    )
    monkeypatch.setattr(report_plots, "MIN_MEASURED_TRIALS_FOR_IMPORTANCE", 6)
    values = importances(study, points)
    assert isinstance(values, dict)
    assert set(values) == set(points[0].params)
    assert sum(values.values()) == pytest.approx(1.0)
    assert "5 measured, at least 6" in importances(study, points[:-1])


def test_report_says_in_words_when_there_are_too_few_trials_for_bars(stored, monkeypatch) -> None:
    study, spec, points = stored
    html = build_report(study, spec, objective_of(spec), points, simulated=False)
    assert html.count("Plotly.newPlot") == 2  # Pareto and history, no importance bars
    assert "Too few measured trials to rank parameters by importance: 6 measured" in html
    monkeypatch.setattr(report_plots, "MIN_MEASURED_TRIALS_FOR_IMPORTANCE", 6)
    html = build_report(study, spec, objective_of(spec), points, simulated=False)
    assert html.count("Plotly.newPlot") == 3 and "Parameter importance for the score" in html
    assert "Too few measured trials" not in html


def test_report_is_one_offline_file_with_every_section(stored) -> None:
    study, spec, points = stored
    html = build_report(study, spec, objective_of(spec), points, simulated=False)
    assert "<script src=" not in html  # plotly.js is inlined, not fetched
    assert html.count("Plotly.newPlot") == 2 and len(html) > 3_000_000
    for section in ("What to deploy", "Trade-off", "Search", "Every trial", "Measured on"):
        assert f"{section}" in html
    # Best command under each SLO of the study file, and all of them together: one row for
    # the selections that chose the same trial (issue 46)
    rows = re.findall(
        r'<tr><td class="l">(Under[^<]*|Best[^<]*)</td><td class="trial">(\d+)</td>', html
    )
    assert [(unescape(t).split(":")[0], int(n)) for t, n in rows] == [
        (
            "Best feasible trial (the study's own constraints); Under SLO p99_ttft_ms<=2000; "
            "Under all SLOs",
            6,
        ),
        ("Under SLO mean_tpot_ms<=80", 3),
    ]
    assert "vllm serve &#39;/mnt/My Models/Qwen 32B&#39;" in html  # escaped in HTML
    assert "kv_cache_too_small: No available memory for the cache blocks." in html
    assert "4× a6000" in html and "random 512 in / 128 out" in html
    assert "PREDICTED" not in html and "SIMULATED" not in html
    assert "s of engine time over" in html and "engine s (start-<wbr>up s)</th>" in html
    # the front under its plot: intervals, noise groups, what tuner export ships marked
    assert '<td class="l">1800 [1620–1980]</td>' in html
    assert "within noise of trial 1" in html
    assert "recommended: what tuner export ships</td>" in html  # trial 6, on the front


def test_the_recommended_config_is_marked_off_the_front_with_why(stored) -> None:
    from tuner.results.report.front import front_rows

    _, spec, points = stored
    seven = next(p for p in points if p.number == 7)  # (1900 ms, 60 ms): 6 has (1800, 50)
    info = pareto_front_info(points, spec.objective.slo, recommended=seven)
    assert info.recommended_why is not None
    assert "trial 6 is at least as good on every axis (clearly better on mean TPOT)" in (
        info.recommended_why
    )
    rows = front_rows(info)
    assert [r[0] for r in rows] == ["1", "2", "0 ★ baseline", "6", "7"]
    assert rows[-1][3] == "off the front" and rows[-1][4].startswith("recommended")
    traces = {t.name.split(";")[0]: t for t in plot_pareto(info).data}
    assert list(traces["recommended: trial 7 (what tuner export ships)"].x) == [1900.0]


def test_text_from_the_study_is_escaped_by_the_templates(stored) -> None:
    """The templates autoescape: markup in the study file (its description, a flag's value)
    arrives in the page as text, never as a tag."""
    study, spec, points = stored
    evil = "<script>alert('x')</script>"
    engine = spec.engine.model_copy(update={"flags": {**spec.engine.flags, "tag": evil}})
    spec = spec.model_copy(update={"description": evil, "engine": engine})
    html = build_report(study, spec, objective_of(spec), points, simulated=False)
    assert evil not in html and "<script>alert" not in html
    escaped = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"
    assert f'<p class="sub">{escaped} · ' in html  # the subtitle
    assert f"--tag {escaped}" in html  # the engine's fixed flags, in "Measured on"


def test_trials_table_rows_classify_every_trial(stored) -> None:
    _, _, points = stored
    table = trials_table(points, {0, 1, 2, 6})
    classes = re.findall(r'<tr class="(\w+)"><td>(\d+)', table)
    assert classes == [
        ("front", "0"),
        ("front", "1"),
        ("front", "2"),
        ("infeasible", "3"),
        ("failed", "4"),
        ("failed", "5"),
        ("front", "6"),
        ("feasible", "7"),
    ]
    assert "0 ★ baseline" in table
    assert "interrupted: interrupted" not in table  # kind and reason said once


def test_simulated_report_says_so(tmp_path: Path) -> None:
    _, url = build_study(tmp_path, simulated=True)
    store, study, spec, points = _load(url, "handbuilt-simulated")
    html = build_report(study, spec, objective_of(spec), points, simulated=True)
    store.close()
    assert "SIMULATED study: every figure in this report is a prediction" in html
    assert "PREDICTED by the tuner&#39;s simulator" in html


def test_multi_objective_and_all_failed_studies_still_report(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "f").mkdir()
    _, url = build_study(tmp_path / "m", mode="multi")
    store, study, spec, points = _load(url)
    page = build_report(study, spec, objective_of(spec), points, simulated=False)
    assert "Plotly.newPlot" in page
    store.close()
    _, url = build_study(tmp_path / "f", trials={4: (0, 0, 0, 10.0, "failed")})
    store, study, spec, points = _load(url)
    html = build_report(study, spec, objective_of(spec), points, simulated=False)
    store.close()
    assert "no trial of study &#39;handbuilt&#39; was measured" in html
    assert "Too few measured trials to rank parameters by importance: 0 measured" in html
    # one line each, no empty card under "What to deploy" and no empty history plot
    assert '<div class="card"></div>' not in html
    assert "No trial was measured yet: no score to plot." in html
    assert html.count("Plotly.newPlot") == 1  # the trade-off plot only


def test_png_is_written(stored, tmp_path: Path) -> None:
    _, spec, points = stored
    out = tmp_path / "front.png"
    write_png(points, out, "handbuilt", slo_lines=spec.objective.slo)
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_predictions_section_shows_predicted_against_measured() -> None:
    from tuner import trial as tr
    from tuner.results.report.page import predictions_section
    from tuner.trial import TrialPoint

    attrs = {
        **tr.TrialRecord(
            predicted_metrics={"p99_ttft_ms": 100.0, "mean_tpot_ms": 20.0}, predicted_score=-0.1
        ).encode(),
        tr.PREDICTION_ERROR: {"p99_ttft_ms": 0.25, "mean_tpot_ms": -0.5},
    }
    point = TrialPoint(
        number=3,
        state="COMPLETE",
        params={},
        metrics={"p99_ttft_ms": 125.0, "mean_tpot_ms": 10.0},
        status="feasible",
        score=-0.2,
        attrs=attrs,
    )
    html = predictions_section([point])
    assert "Simulator against measurement" in html
    assert "<td>100</td><td>125</td><td>+25.0%</td>" in html
    assert "<td>-50.0%</td>" in html
    unscreened = TrialPoint(
        number=0, state="COMPLETE", params={}, metrics={}, status="feasible", attrs={}
    )
    assert predictions_section([unscreened]) == ""


def test_a_stopped_trials_figures_are_marked_partial_as_in_tuner_trials() -> None:
    """The report's table marks a stopped trial's figures `~` (they cover the requests done
    when it was stopped), with the legend `tuner trials` prints: one formatter."""
    full = trial_point(frozen(0, p99_ttft_ms=812.0, mean_tpot_ms=40.0, baseline=True))
    stopped = trial_point(frozen(1, "PRUNED", p99_ttft_ms=2345.0, mean_tpot_ms=55.5, partial=True))
    table = trials_table([full, stopped], {0})
    assert "<td>~2345</td>" in table and "<td>~55.5</td>" in table
    assert "<td>812</td>" in table and "~812" not in table
    assert PARTIAL_NOTE in unescape(table)
    assert PARTIAL_NOTE not in trials_table([full], {0})
