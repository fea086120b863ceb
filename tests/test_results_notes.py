"""What the results commands say about trials that are not plain measurements of the current
study file (issue 33): queued trials show the config they will run, not empty cells; a re-run
queued by a loosened SLO is not taken once it is put back; a study file whose measurement
changed since the trials ran is said so."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import optuna
from results_fixtures import PARAMS, build_study

from tuner import trial as tr
from tuner_testing import tuner


def test_queued_trials_show_the_params_they_will_run(tmp_path: Path) -> None:
    study_file, url = build_study(tmp_path)
    stored = optuna.load_study(study_name="handbuilt", storage=url)
    stored.enqueue_trial(PARAMS[1], user_attrs=tr.TrialRecord(confirm_of=1).encode())
    rows = json.loads(tuner("trials", str(study_file), "--format", "json", cwd=tmp_path).stdout)
    queued = [r for r in rows if r["state"] == "WAITING"]
    assert len(queued) == 1
    assert {k: queued[0][f"param_{k}"] for k in PARAMS[1]} == PARAMS[1]
    table = tuner("trials", str(study_file), "--wide", cwd=tmp_path).stdout
    line = next(line for line in table.splitlines() if "WAITING" in line)
    assert str(PARAMS[1]["max-num-seqs"]) in line.split() and "0.85" in line.split(), table


def test_a_rerun_queued_by_a_loosened_slo_is_not_taken_once_it_is_put_back(
    tmp_path: Path,
) -> None:
    """Re-judging queues a stopped trial again under the judging that queued it; with the
    study's judging put back (here: the study's own, another queued it), the run does not
    take it, `trials` says so, and a later re-judging may queue the config afresh."""
    from tuner.run import rejudge
    from tuner.run.reading import StudyReading
    from tuner.spec.study import load_study_spec
    from tuner.trial import specs

    study_file, url = build_study(tmp_path)
    spec = load_study_spec(study_file)
    loose = spec.model_copy(
        update={"objective": spec.objective.model_copy(update={"slo": ["p99_ttft_ms<=9000"]})}
    )
    stopped = tr.TrialPoint(9, "PRUNED", PARAMS[3], {"p99_ttft_ms": 2500.0}, "pruned", None)
    stopped = replace(stopped, stale_stop=True)  # stopped under the study's SLO
    queued: list[tr.TrialRecord] = []
    rejudge.requeue(
        lambda: [stopped], loose, ["slo"], lambda _: None, lambda _, r: queued.append(r)
    )
    assert [r.judging_id for r in queued] == [specs.judging_id(loose)] != [specs.judging_id(spec)]

    stored = optuna.load_study(study_name="handbuilt", storage=url)
    for record in (queued[0], tr.TrialRecord(retry_of=1, judging_id=specs.judging_id(spec))):
        stored.enqueue_trial(PARAMS[3], user_attrs=record.encode())
    waiting = StudyReading(stored).waiting()
    assert [p.record.judging_id for p in waiting] == [specs.judging_id(spec)]  # its own only
    points = StudyReading(stored).points()
    put_back = [p for p in points if p.stale_queue]
    assert len(put_back) == 1 and put_back[0].state == "WAITING"
    # the loosened SLO's stale queue holds no config: re-judging may queue it again
    assert rejudge.to_measure_again([stopped, *put_back], loose) == [stopped]
    table = tuner("trials", str(study_file), cwd=tmp_path).stdout
    assert "WAITING (not taken)" in table or "WAITING" in table
    assert "no longer has: not run unless they come back" in " ".join(table.split()), table


def test_results_say_when_the_file_measures_otherwise_than_the_trials(tmp_path: Path) -> None:
    study_file, _ = build_study(tmp_path)
    same = tuner("best", str(study_file), cwd=tmp_path)
    assert same.returncode == 0 and "changes what a trial measures" not in same.stderr
    study_file.write_text(study_file.read_text().replace("num_prompts: 100", "num_prompts: 50"))
    for command in (["best"], ["trials"], ["export"], ["pareto"]):
        done = tuner(*command, str(study_file), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        note = [line for line in done.stderr.splitlines() if line.startswith("note:")]
        assert len(note) == 1, done.stderr
        assert "changes what a trial measures" in note[0]
        assert "workload.num_prompts: 100 → 50" in note[0] and "--accept-changes" in note[0]


def test_a_confirmed_config_reads_the_same_in_trials_best_export_and_pareto(
    tmp_path: Path,
) -> None:
    """Trial 6 re-measured twice by `--confirm`: every result gives the config's figures
    pooled over its three runs (`tuner.trial.config_figures`): best, export and pareto, and
    `trials` beside each run's own (before: export said score -0.4, pareto -0.3, and trials
    never said which)."""
    from results_fixtures import _trial

    study_file, url = build_study(tmp_path)
    stored = optuna.load_study(study_name="handbuilt", storage=url)
    first = next(t for t in stored.get_trials() if t.number == 6)
    dists = first.distributions
    for ttft, score in ((2000.0, -0.2), (1700.0, -0.3)):  # both within the SLO
        again = _trial(6, ttft, 50.0, 1300.0, score, "ok", dists, "scalar", False, None)
        again.user_attrs["confirm_of"] = 6
        stored.add_trial(again)
    rows = json.loads(tuner("trials", str(study_file), "--format", "json", cwd=tmp_path).stdout)
    row = next(r for r in rows if r["number"] == 6)
    exported = json.loads(
        tuner("export", str(study_file), "--trial", "6", "--format", "json", cwd=tmp_path).stdout
    )
    front = json.loads(tuner("pareto", str(study_file), "--format", "json", cwd=tmp_path).stdout)
    pooled_ttft = (1800.0 * 2000.0 * 1700.0) ** (1 / 3)
    assert row["score"] == -0.4  # its own first run, as every trial row
    assert row["pooled_score"] == exported["score"] and abs(exported["score"] - -0.3) < 1e-9
    for ttft in (row["pooled_p99_ttft_ms"], exported["metrics"]["p99_ttft_ms"]):
        assert abs(ttft - pooled_ttft) < 1e-6
    assert [r["pooled_score"] for r in rows if r["number"] > 7] == [None, None]
    in_front = [r for r in front if r["trial"] == 6]
    assert not in_front or abs(in_front[0]["metrics"]["p99_ttft_ms"] - pooled_ttft) < 1e-6
    best = tuner("best", str(study_file), cwd=tmp_path).stdout
    assert "score -0.300" in best or "best trial 6" not in best, best
    table = " ".join(tuner("trials", str(study_file), cwd=tmp_path).stdout.split())
    assert "trial 6, re-run by --confirm as 8, 9: its figures pooled" in table, table
    assert "score -0.300, p99 TTFT 1829.2 ms" in table, table
