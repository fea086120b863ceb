"""What `tuner run` says while it runs (issue 21, §5): live reasons are never cut mid-sentence,
and when the output is not a terminal (nohup, a log file) a plain progress line comes at least
every TUNER_PROGRESS_INTERVAL_S seconds (30 by default) while a trial runs."""

from __future__ import annotations

import io
import os
import re
from dataclasses import replace
from pathlib import Path

from tuner.run.pipeline import Outcome
from tuner.run.progress import describe, first_sentences
from tuner.trial import SkipPrediction, TrialRecord
from tuner_testing import sim_study, tuner

REFUSAL = (
    "max_num_batched_tokens (2048) is smaller than max_model_len (8192). This effectively "
    "limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject "
    "longer sequences. Please increase max_num_batched_tokens or decrease max_model_len."
)


def test_first_sentences_never_cut_inside_one() -> None:
    assert first_sentences(REFUSAL, 400) == REFUSAL
    short = first_sentences(REFUSAL, 160)
    assert short == REFUSAL.split(". ")[0] + ". (…)"
    assert (
        first_sentences("one long first sentence " * 20)
        == ("one long first sentence " * 20).strip()
    )


def test_live_refusal_is_whole(tmp_path: Path, tiny_model_dir: Path) -> None:
    """vLLM's refusal of the baseline (chunked prefill off, a token budget under
    max-model-len) reads whole in the live lines, however narrow the terminal."""
    study = sim_study(tmp_path, tiny_model_dir, flags={"enable-chunked-prefill": False})
    env = {**os.environ, "COLUMNS": "80"}
    done = tuner("plan", str(study), "--n-trials", "1", "--storage", "sqlite:///t.db",
                 cwd=tmp_path, env=env)  # fmt: skip
    said = " ".join(done.stderr.split())
    assert f"not launched (invalid_argument): {REFUSAL}" in said, done.stderr


def test_plain_progress_lines_when_not_a_terminal(tmp_path: Path, tiny_model_dir: Path) -> None:
    """`tuner run` into a pipe: no live display, but a plain line on the running trial at
    least every interval (0.3 s here, 30 s by default), each saying the phase and the time."""
    study = sim_study(
        tmp_path,
        tiny_model_dir,
        workload={"num_prompts": 12, "request_rate": 3, "random_output_len": 32},
    )
    env = {**os.environ, "TUNER_PROGRESS_INTERVAL_S": "0.3"}
    done = tuner("run", str(study), "--n-trials", "1", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "\x1b[" not in done.stderr  # plain text: no terminal codes in a log file
    beats = re.findall(r"^trial 0: (.+?), (\d+) s in \((\d+)/1 trials done\)$", done.stderr, re.M)
    assert len(beats) >= 5, done.stderr  # the trial lasts seconds: a line every 0.3 s
    phases = {phase for phase, _, _ in beats}
    assert any("measuring" in p for p in phases), phases  # where the trial is, not only "running"
    seconds = [int(s) for _, s, _ in beats]
    assert seconds == sorted(seconds)


def _pruned(record: TrialRecord, metrics: dict[str, float] | None = None) -> Outcome:
    return Outcome("pruned", None, {}, record, metrics=metrics)


def test_a_stopped_trials_live_line_marks_its_figures_partial() -> None:
    """A trial stopped early shows the figures it had reached, each marked `~` as `tuner
    trials` marks them; one ruled out by prediction was never launched and says so."""
    reached = {"p99_ttft_ms": 2345.04, "mean_tpot_ms": 55.5, "output_throughput": 77.0}
    stopped = TrialRecord(partial=True, pruned_reason="SLO broken for sure.", pruned_at_s=12.3)
    line = describe(_pruned(stopped, reached))
    assert line == (
        "[magenta]stopped early[/magenta] after 12.3 s of workload (p99 TTFT ~2345.0 ms, "
        "mean TPOT ~55.50 ms, output ~77.0 tok/s): SLO broken for sure."
    )
    skip = SkipPrediction(score=1.2, ruled_out="predicted score +1.2 cannot beat the best")
    ruled_out = TrialRecord(
        skip_prediction=skip, pruned_reason="ruled out by prediction: predicted", engine_s=0.0
    )
    assert describe(_pruned(ruled_out)) == (
        "[yellow]not launched[/yellow]: ruled out by prediction: predicted"
    )


def test_a_run_where_nothing_meets_the_slo_names_the_closest(capsys) -> None:
    """The end of a run with no feasible trial: the trial that misses the SLO least, with its
    figure, not "see `tuner trials` for the failure reasons" (there was no failure)."""
    from results_fixtures import frozen

    from tuner.commands.run_output import print_result as _print_result
    from tuner.run.session import RunResult
    from tuner.run.summary import RunSummary
    from tuner.trial import read

    slow = read(frozen(0, p99_ttft_ms=107.3, constraints={"p99_ttft_ms<=1": 106.3}, score=0.0))
    _print_result(RunResult(RunSummary("s"), None, [slow]))  # type: ignore[arg-type]
    said = capsys.readouterr().err
    assert said == (
        "no feasible trial yet: closest is trial 0 (breaks p99_ttft_ms<=1: p99_ttft_ms=107.3); "
        "`tuner trials` says why each\n"
    )
    _print_result(RunResult(RunSummary("s"), None, []))  # type: ignore[arg-type]
    assert "no feasible trial yet: none was measured;" in capsys.readouterr().err


def test_configs_the_budget_does_not_count_do_not_advance_the_live_count() -> None:
    """A config vLLM's rules refuse is not in `n_trials` (`summary.in_budget`): the live
    display read "trial 11/8" after 3 refusals in a budget of 8."""
    from rich.console import Console

    from tuner.run.progress import RichProgress
    from tuner.run.summary import in_budget

    refused = Outcome("refused", None, {}, TrialRecord(failure_reason="vLLM refuses it."))
    refused = replace(refused, saved_by="rules")
    measured = Outcome("measured", [0.0], {}, TrialRecord(score=0.0), metrics={})
    assert not in_budget(refused, False) and in_budget(measured, False)
    out = io.StringIO()
    progress = RichProgress(Console(file=out, width=120, force_terminal=True))  # the bar drawn
    progress.start(2)
    for number, outcome in enumerate((measured, refused, refused, measured)):
        progress.done(number, outcome, 0.0, counted=in_budget(outcome, False))
    progress.stop()
    task = progress._progress.tasks[0]
    assert (task.completed, task.total) == (2, 2)
    progress.done(4, measured, -0.00004)  # a best a hair under the baseline's 0
    assert task.fields["best"] == "+0.000"  # as `tuner trials` writes it, never "-0.000"
    assert "trial 2/2" in out.getvalue() and "trial 4/2" not in out.getvalue()
