"""`tuner pareto|export|report` as a user runs them (a process of its own: a fork of the tests'
`tuner` zygote, as a fresh `python -m tuner.cli`; tuner_testing.zygote), bad input, and
optuna-dashboard's own loader on stored studies (hand-built and from `tuner plan`)."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
from pathlib import Path
from wsgiref.util import setup_testing_defaults

import optuna
import pytest
import yaml
from results_fixtures import build_study

from tuner.store.storage import Store
from tuner_testing import tuner as run_tuner

REPO = Path(__file__).resolve().parents[1]


def tuner(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    env.pop("TUNER_STORAGE", None)
    return run_tuner(*args, cwd=cwd, env=env, timeout=300)


@pytest.fixture
def study(tmp_path: Path) -> tuple[str, str]:
    study_file, url = build_study(tmp_path)
    return str(study_file), url


def test_pareto_json_csv_table(study) -> None:
    study_file, url = study
    done = tuner("pareto", study_file, "--storage", url, "--format", "json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [r["trial"] for r in rows] == [1, 2, 0, 6]
    assert set(rows[0]) == {
        "trial",
        "runs",
        "pooled_trials",
        "params",
        "metrics",
        "within_noise_of",
    }
    assert rows[0]["runs"] == 1 and rows[0]["pooled_trials"] == [1]
    assert rows[0]["params"]["max-num-seqs"] == 64 and rows[0]["metrics"]["p99_ttft_ms"] == 900
    # every metric of the front with its 95 % interval (null: none stored)
    for row in rows:
        metrics = row["metrics"]
        assert all(m + "_ci" in metrics for m in metrics if not m.endswith("_ci"))
    assert rows[0]["metrics"]["p99_ttft_ms_ci"] == [810, 990]
    # 1 and 2 measured the same (900 ms, 75 ms): one group; 0 and 6 are trade-offs of their own
    assert [r["within_noise_of"] for r in rows] == [None, 1, None, None]

    done = tuner("pareto", study_file, "--storage", url, "--format", "csv",
                 "--objectives", "p99_ttft_ms,output_throughput")  # fmt: skip
    table = list(csv.DictReader(io.StringIO(done.stdout)))
    # TTFT down, throughput up: 1 (900, 1200) beats its twin 2 (900, 1100); 6 has most tok/s.
    assert [r["trial"] for r in table] == ["1", "6"]
    assert table[1]["output_throughput"] == "1300.0"
    assert table[0]["p99_ttft_ms_ci_low"] == "810.0" and table[0]["p99_ttft_ms_ci_high"] == "990.0"

    done = tuner("pareto", study_file, "--storage", url)
    assert done.returncode == 0 and "Pareto front of handbuilt" in done.stdout
    assert "0* " in done.stdout and "* the baseline" in done.stdout
    shown = " ".join(done.stdout.split())
    assert (
        "4 of 5 feasible configs" in shown
        and "3 of these 4 configs are trade-offs of their own; the other is within noise" in shown
    )


def test_pareto_in_capacity_mode_is_the_reports_front(tmp_path: Path) -> None:
    """Capacity mode: each trial's latencies are at its own capacity rate, so the plain front
    (1, 2, 0, 6) holds configs that serve half the traffic; `tuner pareto` shows the front of
    the configs that serve the most (6 and 7: 6 dominates 7), the one the report draws."""
    from tuner.results.report import pareto_front_info
    from tuner.results.shipped import study_points

    capacity = {0: 1.0, 1: 1.0, 2: 1.0, 3: 2.0, 6: 2.0, 7: 2.0}
    attrs = {n: {"capacity_rps": rps} for n, rps in capacity.items()}
    study_file, url = build_study(tmp_path, mode="capacity", attrs=attrs)
    done = tuner("pareto", str(study_file), "--storage", url, "--format", "json")
    assert done.returncode == 0, done.stderr
    assert [r["trial"] for r in json.loads(done.stdout)] == [6]
    stored = Store(url).load_study("handbuilt")
    info = pareto_front_info(study_points(stored))
    assert [p.number for p in info.front] == [6] and info.front_capacity_rps == 2.0
    out = tuner("pareto", str(study_file), "--storage", url)  # a pipe: 80 columns
    table = " ".join(out.stdout.split())
    assert "1 of 5 feasible configs, among those with the highest capacity, 2 req/s" in table
    # the title's parts one under the other, left-aligned, wrapped on words: not rich's title
    # centred over the table and broken mid-phrase
    assert out.stdout.splitlines()[:4] == [
        "Pareto front of handbuilt: 1 of 5 feasible configs, among those with the highest",
        "  capacity, 2 req/s",
        "objectives: P99 TTFT (ms), lower is better; mean TPOT (ms), lower is better",
        "each trial's latencies are at its own capacity rate (capacity mode)",
    ]


def test_pareto_and_export_agree_across_objective_modes(tmp_path: Path) -> None:
    """A multi-objective study of the same measurements gives the same front and choice."""
    study_file, url = build_study(tmp_path, mode="multi")
    done = tuner("pareto", str(study_file), "--storage", url, "--format", "json")
    assert [r["trial"] for r in json.loads(done.stdout)] == [1, 2, 0, 6]
    done = tuner("export", str(study_file), "--storage", url, "--format", "json")
    assert json.loads(done.stdout)["trial"] == 6
    done = tuner("export", str(study_file), "--storage", url, "-o", str(tmp_path / "no" / "x"))
    assert done.returncode == 2 and "does not exist" in done.stderr


def test_export_formats_and_output_file(study, tmp_path: Path) -> None:
    study_file, url = study
    done = tuner("export", study_file, "--storage", url)
    assert done.returncode == 0, done.stderr
    assert "trial 6: best score among the 5 feasible trials" in done.stdout
    assert "vllm serve '/mnt/My Models/Qwen 32B'" in done.stdout

    out = tmp_path / "best.yaml"
    done = tuner("export", study_file, "--storage", url, "--slo", "mean_tpot_ms<=45",
                 "--format", "yaml", "-o", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "trial 3" in done.stderr
    cfg = yaml.safe_load(out.read_text())
    assert cfg["max-num-seqs"] == 128 and cfg["enable-chunked-prefill"] is True
    assert f"vllm serve --config {out}" in out.read_text()

    done = tuner("export", study_file, "--storage", url, "--trial", "7", "--format", "json")
    doc = json.loads(done.stdout)
    assert doc["trial"] == 7 and doc["study"] == "handbuilt" and doc["params"]["block-size"] == 16


def test_report_writes_html_and_png(study, tmp_path: Path) -> None:
    study_file, url = study
    html, png = tmp_path / "report.html", tmp_path / "front.png"
    done = tuner("report", study_file, "--storage", url, "-o", str(html), "--png", str(png))
    assert done.returncode == 0, done.stderr
    assert "Every trial" in html.read_text() and png.read_bytes()[:4] == b"\x89PNG"


BAD = [
    (["export", "--slo", "p99_ttft_ms<<2000"], "malformed SLO 'p99_ttft_ms<<2000'"),
    (["export", "--slo", "p99_tft_ms<=2000"], "unknown metric 'p99_tft_ms'"),
    (["export", "--slo", "p95_ttft_ms<=2000"], "'p95_ttft_ms' is not stored in study"),
    (["export", "--slo", "p99_ttft_ms<=100"], "meets p99_ttft_ms<=100; closest is trial 1"),
    # as the study file's SLO: a limit on the wrong side, or one no metric can meet
    (["export", "--slo", "p99_ttft_ms>=5"], "bounds the wrong side: p99_ttft_ms is lower is"),
    (["export", "--slo", "output_throughput<=5"], "its limit is output_throughput>=VALUE"),
    (["export", "--slo", "p99_ttft_ms<=-5"], "can never be met: metrics are never negative"),
    (["export", "--trial", "42"], "study 'handbuilt' has no trial 42"),
    (["export", "--trial", "4"], "trial 4 failed (kv_cache_too_small"),
    (["export", "--format", "toml"], "unknown format 'toml'"),
    (["export", "--format", "yaml", "-o", "best.txt"], "with a .yaml or .yml name"),
    (["pareto", "--objectives", "p99_ttft_ms,tpot"], "unknown metric 'tpot'"),
    (["pareto", "--objectives", "p95_ttft_ms"], "'p95_ttft_ms' is not stored"),
    (["pareto", "--format", "xml"], "unknown format 'xml'"),
    (["pareto", "--simulated"], "no study named 'handbuilt-simulated'"),
]


@pytest.mark.parametrize(("args", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_and_exit_2(study, args: list[str], message: str) -> None:
    study_file, url = study
    done = tuner(args[0], study_file, "--storage", url, *args[1:])
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("tuner: error: ") and message in done.stderr, done.stderr


def test_study_without_complete_trials_and_missing_database(tmp_path: Path) -> None:
    study_file, url = build_study(tmp_path, trials={})
    for args in (["pareto"], ["export"], ["report", "-o", str(tmp_path / "r.html")]):
        done = tuner(args[0], str(study_file), "--storage", url, *args[1:])
        assert done.returncode == 2 and done.stderr.count("\n") == 1
        assert "study 'handbuilt' has no complete trial yet" in done.stderr
    done = tuner("pareto", str(study_file), "--storage", f"sqlite:///{tmp_path}/nothing.db")
    assert done.returncode == 2 and "no database at" in done.stderr
    assert not (tmp_path / "nothing.db").exists()
    done = tuner("export", str(tmp_path / "missing.yaml"), "--storage", url)
    assert done.returncode == 2 and "study file not found" in done.stderr


# optuna-dashboard ----------------------------------------------------------------------------


def _get(app, path: str) -> tuple[str, dict]:
    environ: dict = {"PATH_INFO": path, "REQUEST_METHOD": "GET"}
    setup_testing_defaults(environ)
    status: list[str] = []
    body = b"".join(app(environ, lambda s, h, *a: status.append(s)))
    return status[0], json.loads(body)


def _dashboard_view(url: str, name: str) -> tuple[dict, object, int]:
    from optuna_dashboard import wsgi

    app = wsgi(url)
    status, studies = _get(app, "/api/studies")
    assert status.startswith("200")
    study_id = next(s["study_id"] for s in studies["study_summaries"] if s["study_name"] == name)
    status, detail = _get(app, f"/api/studies/{study_id}")
    assert status.startswith("200"), detail
    return detail, app, study_id


@pytest.mark.parametrize("mode", ["scalar", "multi"])
def test_optuna_dashboard_reads_stored_study(tmp_path: Path, mode: str) -> None:
    """The dashboard's own WSGI app and serializer load our study: metric names label the axes,
    infeasible and refused trials carry the constraints it reads, parameter importance works,
    and in multi-objective mode its Pareto page (best_trials, plot/pareto_front) works."""
    _, url = build_study(tmp_path, mode=mode)
    detail, app, study_id = _dashboard_view(url, "handbuilt")
    trials = {t["number"]: t for t in detail["trials"]}
    assert len(trials) == 8
    # The dashboard's plots split trials with its own rule: every constraint <= 0 is feasible
    # (grey otherwise). It must agree with ours: 3 broke the SLO, 4 was refused, 5 crashed.
    complete = {n for n, t in trials.items() if t["state"] == "Complete"}
    feasible = {n for n in complete if all(c <= 0 for c in trials[n]["constraints"])}
    assert feasible == {0, 1, 2, 6, 7} and complete - feasible == {3, 4}
    assert trials[5]["state"] == "Fail"
    attrs = {a["key"]: a["value"] for a in trials[6]["user_attrs"]}
    assert attrs["p99_ttft_ms"] == "1800.0"
    if mode == "scalar":
        assert detail["objective_names"] == ["score"]
    else:
        assert detail["objective_names"] == ["p99_ttft_ms", "mean_tpot_ms", "output_throughput"]
        # Its Pareto page: the server's front ignores constraints (documented in
        # docs/results.md), so infeasible 3 is on it; the plot marks it infeasible.
        assert {1, 3, 6} <= {t["number"] for t in detail["best_trials"]}
        status, plot = _get(app, f"/api/studies/{study_id}/plot/pareto_front")
        figure = json.loads(plot) if isinstance(plot, str) else plot
        assert status.startswith("200") and len(figure["data"]) >= 1
    status, importance = _get(app, f"/api/studies/{study_id}/param_importances")
    assert status.startswith("200") and importance["param_importances"]


def test_failed_trials_keep_the_dashboard_axes_readable(tmp_path: Path) -> None:
    _, url = build_study(tmp_path, mode="multi")
    detail, _, _ = _dashboard_view(url, "handbuilt")
    measured = [v for t in detail["trials"] if t["number"] not in (4, 5) for v in t["values"]]
    failed = next(t for t in detail["trials"] if t["number"] == 4)
    assert max(failed["values"]) <= 100 * max(measured)


@pytest.mark.slow  # a whole study
def test_end_to_end_planned_study_export_report_dashboard(tmp_path: Path) -> None:
    """A short simulated study (`tuner plan`), then export, report and the dashboard on it."""
    if not (REPO / ".cache" / "tiny-qwen2" / "tokenizer.json").exists():
        done = tuner("make-tiny-model")
        assert done.returncode == 0, done.stderr
    url = f"sqlite:///{tmp_path / 'plan.db'}"
    study_file = "studies/demo-sim.yaml"
    done = tuner("plan", study_file, "--n-trials", "8", "--storage", url)
    assert done.returncode == 0, done.stderr[-2000:]
    sim = ["--storage", url, "--simulated"]
    done = tuner("export", study_file, *sim, "--format", "json")
    doc = json.loads(done.stdout)
    # 3: the defaults written (held back, or no tuned config beat them; 8 planned trials of
    # the demo may find nothing), 0: a tuned config recommended
    held = doc["recommendation"]["recommended"] == "defaults" or doc["trial"] == 0
    assert done.returncode == (3 if held else 0), done.stderr
    assert doc["simulated"] is True and doc["command"][:2] == ["vllm", "serve"]
    assert "tuner" not in " ".join(doc["command"])  # production command, not the simulator's
    done = tuner("export", study_file, *sim)
    assert "PREDICTED" in done.stdout
    html = tmp_path / "r.html"
    done = tuner("report", study_file, *sim, "-o", str(html))
    assert done.returncode == 0, done.stderr
    assert "SIMULATED study" in html.read_text()
    done = tuner("pareto", study_file, *sim, "--format", "json")
    assert done.returncode == 0 and json.loads(done.stdout)
    detail, _, _ = _dashboard_view(url, "demo-sim-simulated")
    assert len(detail["trials"]) >= 8 and detail["objective_names"] == ["score"]
    store = Store(url)
    assert store.load_study("demo-sim-simulated").user_attrs["simulated"] is True
    store.close()
    assert optuna.__version__ >= "5"


def test_json_and_csv_floats_read_as_the_decimals_they_stand_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stepped float range stores 0.8999999999999999 (and a figure its binary noise):
    `pareto --format json|csv` and `export --format json` write 0.9, as the command does,
    and keep a measured figure's digits that matter (`tuner.spec.figures.exact`)."""
    from results_fixtures import PARAMS

    for n in (1, 2):  # both on the front
        monkeypatch.setitem(PARAMS, n, {**PARAMS[n], "gpu-memory-utilization": 0.8999999999999999})
    study_file, _ = build_study(tmp_path)
    outputs = [
        tuner("pareto", str(study_file), "--format", fmt, cwd=tmp_path).stdout
        for fmt in ("json", "csv")
    ]
    outputs.append(tuner("export", str(study_file), "--format", "json", cwd=tmp_path).stdout)
    for text in outputs:
        assert "0.8999999" not in text, text
    rows = json.loads(outputs[0])
    assert {r["params"]["gpu-memory-utilization"] for r in rows if r["trial"] in (1, 2)} == {0.9}
    exported = json.loads(outputs[2])
    assert exported["params"]["gpu-memory-utilization"] == 0.9
    assert "--gpu-memory-utilization 0.9" in " ".join(exported["command"])
