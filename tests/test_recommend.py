"""Recommend only what the evidence carries (issue 34): when the best tuned config is not
clearly better than vLLM's defaults, or is FRAGILE, `best`, `export` and the report recommend
the defaults and show the tuned config as a candidate with what would settle it; `export`
exits 3 unless `--candidate`. And everything that got worse is listed, with its interval."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from results_fixtures import build_study, write_study_file

from tuner import trial as tr
from tuner.measure.mixes import objective_of
from tuner.results.best import best_report
from tuner.results.change import moved_from_defaults, moved_lines
from tuner.results.recommend import HELD_EXIT_CODE, recommendation
from tuner.results.verdicts import Verdict
from tuner.spec.study import load_study_spec
from tuner_testing import tuner

# (p99 TTFT, mean TPOT, output, score, kind): trial 1 scores better, but within the intervals
# (±10 % on p99 TTFT and mean TPOT in `build_study`): not clearly better than the defaults
CLOSE = {
    0: (1500.0, 70.0, 1000.0, 0.0, "ok"),
    1: (1450.0, 69.0, 1010.0, -0.05, "ok"),
}
# trial 1's mean TPOT 50 ms, interval 45–55, against the defaults' 63–77: clearly better
CLEAR = {0: CLOSE[0], 1: (1450.0, 50.0, 1010.0, -0.35, "ok")}


def _cli(study_file: Path, url: str, *args: str):
    return tuner(*args, str(study_file), "--storage", url, cwd=study_file.parent)


def test_export_writes_the_defaults_and_exits_3_when_the_best_is_not_clearly_better(
    tmp_path: Path,
) -> None:
    study_file, url = build_study(tmp_path, trials=CLOSE)
    done = _cli(study_file, url, "export")
    assert done.returncode == HELD_EXIT_CODE == 3, done.stderr
    text = done.stdout
    # the command is the defaults' (trial 0: max-num-seqs 256), the candidate's is not
    assert "--max-num-seqs 256" in text and "--max-num-seqs 64" not in text
    assert "# RECOMMENDED: vLLM's defaults (baseline trial 0), the config you already run" in text
    assert "# the best tuned config, trial 1, is only a CANDIDATE: NOT clearly better" in text
    assert f"# to settle it: tuner run {study_file} --confirm 2 re-measures" in text  # its name
    assert "exit code 3 (--candidate writes the candidate)" in done.stderr
    # asked for explicitly: the candidate, with its verdicts, exit 0
    asked = _cli(study_file, url, "export", "--candidate")
    assert asked.returncode == 0, asked.stderr
    assert "--max-num-seqs 64" in asked.stdout and "RECOMMENDED" not in asked.stdout
    assert "# DOUBT: NOT clearly better than the baseline (trial 0)" in asked.stdout
    assert _cli(study_file, url, "export", "--trial", "1").returncode == 0  # named: asked for
    doc = json.loads(_cli(study_file, url, "export", "--format", "json").stdout)
    rec = doc["recommendation"]
    assert (doc["trial"], rec["recommended"], rec["candidate_trial"]) == (0, "defaults", 1)
    assert rec["confirm_k"] == 2 and rec["held_by"][0]["kind"] == "not-clearly-better-than-baseline"
    assert (
        "--max-num-seqs" in doc["command"]
        and doc["command"][doc["command"].index("--max-num-seqs") + 1] == "256"
    )


def test_best_and_the_report_recommend_the_defaults_and_name_the_candidate(
    tmp_path: Path,
) -> None:
    study_file, url = build_study(tmp_path, trials=CLOSE)
    best = _cli(study_file, url, "best")
    assert best.returncode == 0, best.stderr
    out = best.stdout
    assert out.startswith("# best trial 1 of study handbuilt — a CANDIDATE, not recommended")
    command = [line for line in out.splitlines() if not line.startswith("#")]
    assert "--max-num-seqs 256" in "\n".join(command)  # the defaults' command is the one to run
    assert "#     --max-num-seqs 64 \\" in out  # the candidate's, commented
    report = tmp_path / "r.html"
    assert _cli(study_file, url, "report", "-o", str(report)).returncode == 0
    page = report.read_text()
    assert "0: vLLM&#39;s defaults (candidate: trial 1)" in page
    assert f"tuner export {study_file} --candidate" in page


def test_a_clear_gain_is_recommended_and_said_in_words(tmp_path: Path) -> None:
    study_file, url = build_study(tmp_path, trials=CLEAR)
    done = _cli(study_file, url, "export")
    assert done.returncode == 0, done.stderr
    assert "--max-num-seqs 64" in done.stdout and "RECOMMENDED" not in done.stdout
    best = _cli(study_file, url, "best").stdout
    assert (
        "# CLEARLY better than vLLM's defaults (baseline trial 0) on mean TPOT: the 95% "
        "confidence interval of the difference lies wholly on the better side" in best
    )
    # the whole story: the setting and the intervals
    for line in (
        "# hardware: 4× a6000",
        "# workload: random 512 in / 128 out, 100 prompts, 8 req/s, /v1/completions",
        "# SLO: p99_ttft_ms<=2000, mean_tpot_ms<=80",
        "# 95% intervals: p99 TTFT 1305–1595 ms, mean TPOT 45–55 ms",
    ):
        assert line in best.splitlines(), best


def test_fragile_holds_the_candidate_back_and_the_cost_of_settling_it(tmp_path: Path) -> None:
    spec = load_study_spec(write_study_file(tmp_path))
    base, cand = (_point(n, engine_s=100.0, startup_s=40.0) for n in (0, 1))
    fragile = Verdict("fragile", "FRAGILE: its gain does not survive prompts +3%", True)
    rec = recommendation(cand, [fragile], [cand, base], spec.trial, base)
    assert rec.held and rec.recommended is base and rec.confirm_k == 2
    # 2 configs × 3 runs × 100 s, plus 2 starts of 40 s and 5 × 60 s of workload: 1280 s
    assert rec.settle.endswith("about 21 min of engine time at what these trials took")
    # the defaults are no fallback when they are not a candidate (they break the SLO given)
    assert not recommendation(cand, [fragile], [cand], spec.trial, base).held


def test_the_cost_of_settling_counts_the_smallest_change_re_measures(tmp_path: Path) -> None:
    """`--confirm` also re-measures the flags the simulator dropped (one engine start and one
    workload run each, all of them together once more): 3 starts of 100 s for two flags."""
    spec = load_study_spec(write_study_file(tmp_path))
    base, cand = (_point(n, engine_s=100.0, startup_s=40.0) for n in (0, 1))
    fragile = Verdict("fragile", "FRAGILE: its gain does not survive prompts +3%", True)
    reverts = tuple(
        tr.FlagRevert(flag, 1, 2, 0.0, False, "no worse") for flag in ("block-size", "x", "y")
    )
    flags = tr.SmallestChange(cand.spec_id, True, reverts=reverts, kept=("y",), trial=1)
    assert flags.remeasure_starts == 3
    rec = recommendation(cand, [fragile], [cand, base], spec.trial, base, flags)
    assert (
        ", then the flags the simulator dropped (block-size, x) reverted: 3 engine starts of "
        "1 workload run, about 26 min of engine time"  # 1280 s + 3 × 100 s
    ) in rec.settle
    one = tr.SmallestChange(cand.spec_id, True, reverts=reverts, kept=("x", "y"), trial=1)
    assert (
        "(block-size) reverted: 1 engine start of 1 workload run"
        in recommendation(cand, [fragile], [cand, base], spec.trial, base, one).settle
    )
    other_spec = tr.SmallestChange("another", True, reverts=reverts, trial=1)
    assert recommendation(cand, [fragile], [cand, base], spec.trial, base, other_spec).settle == (
        rec.settle.split(", then the flags")[0] + ", about 21 min of engine time at what these "
        "trials took"
    )


def _point(number: int, **attrs: float) -> tr.TrialPoint:
    trial = optuna.trial.create_trial(
        params={"max-num-seqs": 8 * (number + 1)},
        distributions={"max-num-seqs": optuna.distributions.IntDistribution(1, 1024)},
        value=0.0,
        user_attrs={tr.BASELINE: number == 0, tr.SCORE: -0.1 * number, **attrs},
    )
    trial.number = number
    return tr.read_all([trial])[0]


def test_every_metric_that_moved_is_listed_with_its_size_and_whether_clearly(
    tmp_path: Path,
) -> None:
    """The demo's best (issue 46, item 3): median ITL ×6.7 with the wide interval of a bimodal
    median is listed, "not clearly"; mean ITL +50 % clearly worse; request throughput −10 %,
    clearly worse though small; p99 ITL −48 % better with no interval stored; mean TTFT +4 %
    within its interval and a spread (`std_*`) are not listed."""
    spec = load_study_spec(write_study_file(tmp_path))
    base = _point(
        0,
        median_itl_ms=36.93,
        median_itl_ms_ci=[36.92, 37.53],
        mean_itl_ms=40.0,
        mean_itl_ms_ci=[38.0, 42.0],
        mean_ttft_ms=500.0,
        mean_ttft_ms_ci=[450.0, 550.0],
        p99_itl_ms=483.5,
        request_throughput=2.0,
        request_throughput_ci=[1.98, 2.02],
        std_itl_ms=100.0,
    )
    tuned = _point(
        1,
        median_itl_ms=246.8,
        median_itl_ms_ci=[35.2, 247.6],
        mean_itl_ms=60.0,
        mean_itl_ms_ci=[55.0, 65.0],
        mean_ttft_ms=520.0,  # worse, but within the intervals and by less than 25 %
        mean_ttft_ms_ci=[470.0, 570.0],
        p99_itl_ms=251.5,
        request_throughput=1.8,
        request_throughput_ci=[1.78, 1.82],
        std_itl_ms=300.0,
    )
    found = moved_from_defaults(tuned, base)
    assert [(m.change.metric, m.worse, m.clearly) for m in found] == [
        ("mean_itl_ms", True, True),
        ("request_throughput", True, True),
        ("median_itl_ms", True, False),
        ("p99_itl_ms", False, False),
    ]
    words = [m.words() for m in found]
    assert words[0] == "mean ITL 40 → 60 ms (+50 %; clearly: CI 55–65 against 38–42)"
    assert (
        words[2]
        == "median ITL 36.93 → 246.8 ms (×6.7; not clearly: CI 35.2–247.6 against 36.92–37.53)"
    )
    assert words[3] == "p99 ITL 483.5 → 251.5 ms (−48 %; no interval stored)"
    text = best_report([base, tuned], "demo", tr.StudyRecord(spec=spec.model_dump(mode="json")))
    worse, better = (f"# {line}" for line in moved_lines(found, 0))
    assert worse == "# WORSE than vLLM's defaults (baseline trial 0): " + "; ".join(words[:3])
    assert better.startswith("# better than vLLM's defaults (baseline trial 0) by 25 % or more: ")
    assert worse in text.splitlines() and better in text.splitlines()
    # nothing moved: said so, in one line
    assert moved_lines(moved_from_defaults(base, _point(2, **base.metrics)), 2) == [
        "nothing stored got worse than vLLM's defaults (baseline trial 2), neither by 25 % or "
        "more nor clearly"
    ]


@pytest.mark.parametrize("kind", ["confirmed", "not-clearly-better-than-runner-up", "robust"])
def test_other_doubts_do_not_hold_the_candidate_back(tmp_path: Path, kind: str) -> None:
    spec = load_study_spec(write_study_file(tmp_path))
    base, cand = _point(0), _point(1)
    assert not recommendation(cand, [Verdict(kind, "x", True)], [cand, base], spec.trial, base).held  # type: ignore[arg-type]


def test_export_exits_3_when_no_tuned_config_beat_the_defaults(tmp_path: Path) -> None:
    """CI reads exit 0 as "deploy: a clear gain"; when the best trial is the baseline itself
    the file holds vLLM's defaults, what the user already runs: 3, as when a candidate is
    held back. Asked for by number, it is exported as asked (0)."""
    worse = {0: CLOSE[0], 1: (1600.0, 75.0, 990.0, 0.1, "ok")}
    study_file, url = build_study(tmp_path, trials=worse)
    done = _cli(study_file, url, "export")
    assert done.returncode == HELD_EXIT_CODE, done.stderr
    assert "--max-num-seqs 256" in done.stdout  # the defaults' command
    assert "the best is vLLM's defaults (baseline trial 0)" in done.stderr
    assert _cli(study_file, url, "export", "--trial", "0").returncode == 0


def test_an_interval_straddling_the_slo_is_a_doubt_in_every_output(tmp_path: Path) -> None:
    """Issue 46, item 5: the report said "doubts: none" beside an export whose P99 TTFT
    interval straddled the SLO. It is one verdict (a doubt), so each output that lists the
    doubts (best, export, the report's column) has it; an interval clear of it is none."""
    from tuner.results.selection import judge, select_trial
    from tuner.results.study_file import study_file_words

    spec = load_study_spec(write_study_file(tmp_path))  # p99_ttft_ms<=2000
    base = _point(0, p99_ttft_ms=1500.0, p99_ttft_ms_ci=[1400.0, 1600.0])
    tuned = _point(1, p99_ttft_ms=1900.0, p99_ttft_ms_ci=[1700.0, 2100.0])
    chosen = judge(
        select_trial([base, tuned], "demo"), [base, tuned], spec, objective_of(spec), None, base
    )
    assert chosen.point.number == 1
    (doubt,) = [v for v in chosen.verdicts if v.kind == "interval-straddles-slo"]
    assert doubt.doubt and "the interval straddles the SLO p99_ttft_ms<=2000" in doubt.text
    # the commands that settle it name the study file (the walk of issue 49/50: no file named)
    file = (
        study_file_words()
    )  # the file a command set (`study_file.STUDY_FILE`), else a placeholder
    assert doubt.text.endswith(
        f"(tuner run {file} --confirm K, or tuner verify {file}, re-measures it)"
    )
    text = best_report([base, tuned], "demo", tr.StudyRecord(spec=spec.model_dump(mode="json")))
    assert f"# {doubt.text}" in text.splitlines()
    own = judge(select_trial([base], "demo"), [base], spec, objective_of(spec), None, base)
    assert not [v for v in own.verdicts if v.kind == "interval-straddles-slo"]
