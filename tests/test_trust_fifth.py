"""Trust, fifth round (issue 50): study-file values that every config would trip over later,
refused when the file is read (one line, exit 2 through the CLI's UserError path)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pydantic
import pytest

from tuner.spec.space import serve_argv
from tuner.spec.study import StudySpec


def _spec(parameters: dict[str, Any], name: str = "s", **flags: Any) -> StudySpec:
    return StudySpec.model_validate(
        {
            "name": name,
            "engine": {"model": "deepseek-r1-distill-qwen-32b", "flags": flags},
            "hardware": {"gpu": "a6000", "count": 4},
            "search_space": {"parameters": parameters},
            "workload": {"num_prompts": 4},
        }
    )


SEQS = {"max-num-seqs": {"type": "int", "low": 8, "high": 64}}
TEXT_BOOL = {"type": "categorical", "choices": ["true", "false"]}


@pytest.mark.parametrize(
    ("parameters", "flags", "name", "needle"),
    [
        # item 10: "--enable-prefix-caching true" reads "true" as a second model
        ({"enable-prefix-caching": TEXT_BOOL}, {}, "s", "give the parameter type bool"),
        ({"p": {**TEXT_BOOL, "flag": "--enable-chunked-prefill"}}, {}, "s", "type bool"),
        (SEQS, {"enforce-eager": "true"}, "s", "write true or false, unquoted, not 'true'"),
        # item 11: vLLM checks gpu_memory_utilization in (0, 1]
        ({"gpu-memory-utilization": {"type": "float", "low": 0.7, "high": 1.5}}, {}, "s",
         "--gpu-memory-utilization takes at most 1, not 1.5"),
        (SEQS, {"gpu-memory-utilization": 1.2}, "s", "takes at most 1"),
        # item 8: `tuner plan` of study `xx` is stored as `xx-simulated`
        (SEQS, {}, "xx-simulated", "the name `tuner plan` gives the planned study of 'xx'"),
    ],
)  # fmt: skip
def test_values_every_config_would_trip_over_are_refused_at_load(
    parameters: dict[str, Any], flags: dict[str, Any], name: str, needle: str
) -> None:
    with pytest.raises(pydantic.ValidationError, match=None) as caught:
        _spec(parameters, name, **flags)
    assert needle in str(caught.value)


def test_on_off_flags_searched_as_bools_still_load_and_pass_no_value() -> None:
    spec = _spec({"enable-prefix-caching": {"type": "bool"}}, **{"enforce-eager": True})
    argv = serve_argv(spec, {"enable-prefix-caching": False})
    assert "--no-enable-prefix-caching" in argv and "--enforce-eager" in argv
    assert "true" not in argv and "false" not in argv
    choices = {"type": "categorical", "choices": [True, False]}
    assert _spec({"enable-chunked-prefill": choices}).search_space.parameters
    assert _spec(SEQS, **{"gpu-memory-utilization": 1.0}).engine.flags


def test_a_capacity_study_whose_only_slo_is_a_floor_is_refused() -> None:
    """Item 12: `output_throughput>=10` is met as easily at a higher rate: every config
    climbed to capacity.max_rps ("≥ 1000 req/s")."""
    data = _spec(SEQS).model_dump(mode="json", exclude_defaults=True)
    floor = {**data, "objective": {"mode": "capacity", "slo": ["output_throughput>=10"]}}
    with pytest.raises(pydantic.ValidationError) as caught:
        StudySpec.model_validate(floor)
    assert "output_throughput>=10 only sets floors" in str(caught.value)
    both = ["output_throughput>=10", "p99_ttft_ms<=2000"]
    assert StudySpec.model_validate({**floor, "objective": {"mode": "capacity", "slo": both}})


def test_a_run_where_no_request_completed_is_a_failure_not_zero_figures() -> None:
    """Item 9: such a trial was listed with p99 TTFT 0 and mean TPOT 0, and scored as the
    study's best; both runners now fail it with the requests' errors."""
    from tuner.errors import FailureKind
    from tuner.measure.measurement import Measurement
    from tuner.measure.records import RequestRecord
    from tuner.runners.trial_runner import nothing_completed

    def run(completed: int, pruned: str | None = None) -> Measurement:
        m = Measurement(metrics={"completed": completed, "failed": 2, "p99_ttft_ms": 0.0})
        m.records = [RequestRecord(9000, error="prompt longer than max-model-len")] * 2
        m.pruned_reason = pruned
        return m

    failed = nothing_completed(run(0), "log tail")
    assert failed is not None and failed.metrics is None
    assert failed.failure_kind == FailureKind.REQUESTS_FAILED
    assert failed.failure_reason == "every request failed: prompt longer than max-model-len"
    assert nothing_completed(run(1)) is None
    assert nothing_completed(run(0, pruned="stopped early")) is None  # partial, labelled so


def test_the_capacity_ceiling_counts_the_share_of_requests_a_limit_reads() -> None:
    """Item 6: under `median_ttft_ms<=1500` the ceiling was sized as for a P99 limit, and the
    search reported 5.42 req/s where 240 prompts at that rate see a median TTFT of ~8.3 s: a
    queue growing in send order pushes its middle request past L only after 2 L of queue."""
    from tuner.measure.capacity import limit_quantile, queue_limit_s, shown_rps
    from tuner.spec.slo import parse_slo

    assert limit_quantile("p99_ttft_ms") == limit_quantile("p90_e2el_ms") == 1.0  # as before
    assert limit_quantile("median_ttft_ms") == limit_quantile("mean_e2el_ms") == 0.5
    assert limit_quantile("p75_ttft_ms") == 0.75
    assert queue_limit_s(parse_slo("median_ttft_ms<=1500")) == pytest.approx(3.0)
    tail, middle = parse_slo("p99_ttft_ms<=1500"), parse_slo("median_ttft_ms<=1500")
    assert shown_rps(240, middle) == pytest.approx(shown_rps(240, tail) / 2)
    assert queue_limit_s(parse_slo("p99_ttft_ms<=4000,median_ttft_ms<=1500")) == 3.0


BLOCK_INT = {"type": "int", "low": 7, "high": 15, "default": 8}


@pytest.mark.parametrize(
    ("parameters", "flags", "every_config_refused"),
    [
        ({"block-size": BLOCK_INT}, {}, True),  # no multiple of 16 in 7-15
        ({"block-size": {"type": "categorical", "choices": [7, 9], "default": 7}}, {}, True),
        (
            {"max-num-batched-tokens": {"type": "int", "low": 64, "high": 128, "default": 128}},
            {"max-num-seqs": 256},
            True,
        ),
        ({"block-size": {"type": "categorical", "choices": [7, 16], "default": 16}}, {}, False),
        (
            {"block-size": {"type": "int", "low": 8, "high": 40, "step": 8, "default": 16}},
            {},
            False,
        ),
    ],
)
def test_check_applies_every_rule_plan_applies_to_the_whole_range(
    parameters: dict[str, Any], flags: dict[str, Any], every_config_refused: bool
) -> None:
    """Item 11: block sizes [7, 16] or 7-15 were "no problem found", though plan and run refuse
    such configs before launch with vLLM's own rule; a space whose every config is refused is
    a problem, one that holds some is a note naming them."""
    from tuner.errors import UserError
    from tuner.run.checks import check_space_starts, plan_checks

    spec = _spec(parameters, **flags)
    if every_config_refused:
        with pytest.raises(UserError, match="vLLM refuses every config it can draw"):
            check_space_starts(spec)
    else:
        check_space_starts(spec)
    refused = []  # `tuner plan` refuses it too (its checks are `check`'s and `run`'s)
    for check in plan_checks(spec):
        try:
            check()
        except UserError as exc:
            refused.append(str(exc))
    assert any("vLLM refuses every config" in r for r in refused) is every_config_refused


def test_check_names_the_block_sizes_of_a_range_and_the_baseline_a_rule_refuses() -> None:
    from tuner.errors import UserError
    from tuner.run.checks import check_baseline_starts
    from tuner.run.preflight import defaults_notes

    stepped = {"type": "int", "low": 8, "high": 40, "step": 8, "default": 16}
    notes = " ".join(defaults_notes(_spec({"block-size": stepped})))
    assert "block-size 8, 24, 40 of the search space: vLLM 0.32.0 refuses it on cuda" in notes
    with pytest.raises(UserError, match=r"baseline .* can never start: No valid attention"):
        check_baseline_starts(_spec({"block-size": BLOCK_INT}))  # its default, 8
    chunk = {"type": "int", "low": 64, "high": 4096, "default": 2048}
    notes = " ".join(
        defaults_notes(_spec({"max-num-batched-tokens": chunk}, **{"max-num-seqs": 256}))
    )
    assert "vLLM refuses some configs it can draw (1 of the 2" in notes
    assert "max_num_batched_tokens (64) must be greater than or equal to max_num_seqs" in notes


@pytest.mark.parametrize("count", [4096, 3])
def test_init_refuses_a_gpu_count_that_cannot_split_the_heads(tmp_path, count: int) -> None:
    """The fourth round's leftover: `init --count 4096` on a 40-head model said "give more
    GPUs (--count)"; tensor parallel splits the attention heads evenly, so it names the counts
    that do (the rate given: refused before any simulation)."""
    from tuner.errors import UserError
    from tuner.scaffold.options import InitOptions
    from tuner.scaffold.study import draft_study
    from tuner_testing.cli import REPO

    given = {"model": "deepseek-r1-distill-qwen-32b", "gpu": "a6000", "count": count, "rate": 1.0,
             "tokenizer": str(REPO / ".cache" / "tiny-qwen2")}  # fmt: skip
    with pytest.raises(UserError) as caught:
        draft_study(InitOptions(**given), tmp_path / "s.yaml", detect=lambda: None)  # type: ignore[arg-type]
    words = str(caught.value)
    assert (
        "splits its 40 attention heads evenly over them: give --count 1, 2, 4, 5, 8, 10, 20, 40"
        in words
    )
    assert "more GPUs" not in words


def test_a_shape_s_summary_counts_every_trial_once_as_tuner_trials_does() -> None:
    """The fourth round's leftover: a shape's line counted ruled-out trials in none of its
    columns ("2 trial(s): 1 feasible, 0 over the SLOs, 0 failed")."""
    from tuner.results.shapes import shape_lines
    from tuner.trial import TrialPoint, TrialRecord
    from tuner.trial.payloads import SkipPrediction

    spec = _spec({"tensor-parallel-size": {"type": "categorical", "choices": [2, 4]}})
    ran = TrialRecord(metrics={"mean_tpot_ms": 50.0}, score=-0.1)
    skipped = TrialRecord(skip_prediction=SkipPrediction(score=1.2, ruled_out="predicted +1.2"))
    points = [
        TrialPoint.measured_as(0, {"tensor-parallel-size": 4}, ran),
        TrialPoint.measured_as(1, {"tensor-parallel-size": 2}, ran),
        replace(TrialPoint.measured_as(2, {"tensor-parallel-size": 2}, skipped), status="pruned"),
    ]
    text = "\n".join(shape_lines(spec, points))
    assert (
        "1 x TP=2, prefix caching on: 2 trial(s): 1 feasible, 0 infeasible, 1 ruled out on a "
        "prediction (never launched), 0 failed; best trial 1" in text
    )


def test_a_config_ruled_out_under_the_previous_slos_says_so() -> None:
    """The fourth round's leftover: a trial stopped under an old SLO read "stopped early under
    the previous SLOs/objective", one ruled out on a prediction then had no such mark."""
    from tuner.results.report.page import _counts
    from tuner.results.views import trials_records
    from tuner.trial import TrialPoint, TrialRecord
    from tuner.trial.payloads import SkipPrediction
    from tuner.trial.scoring import rejudge

    skip = SkipPrediction(score=1.2, ruled_out="predicted score +1.2 cannot beat the best")
    record = TrialRecord(skip_prediction=skip, pruned_reason=skip.ruled_out, judging_id="old")
    ruled = TrialPoint.measured_as(3, {"max-num-seqs": 64}, record)
    ruled = rejudge([replace(ruled, status="pruned", state="PRUNED")], _spec(SEQS), "new")[0]
    assert ruled.stale_stop
    (row,) = trials_records([ruled])
    assert row["failure"] == (
        "ruled out under the previous SLOs/objective: predicted score +1.2 cannot beat the best"
    )
    assert ("of them ruled out under the previous SLOs/objective", 1) in _counts([ruled])
    assert not any("stopped under" in words for words, _ in _counts([ruled]))


def test_init_says_when_vllm_s_defaults_miss_the_slo_at_the_rate_given(tmp_path) -> None:
    """The fourth round's leftover: `init --rate` wrote a rate where vLLM's defaults miss the
    SLO by far without a word (with `--no-preview`)."""
    from tuner.scaffold.options import InitOptions
    from tuner.scaffold.study import draft_study
    from tuner_testing.cli import REPO

    tiny = str(REPO / ".cache" / "tiny-qwen2")
    given = {"model": "deepseek-r1-0528-qwen3-8b", "gpu": "h200", "trials": 2,
             "num_prompts": 40, "slo": ["p99_ttft_ms<=300"], "tokenizer": tiny}  # fmt: skip

    def traffic(rate: float) -> str:
        opts = InitOptions(**given, rate=rate)  # type: ignore[arg-type]
        draft = draft_study(opts, tmp_path / "s.yaml", detect=lambda: None)
        return next(x for x in draft.notes if x.startswith("traffic: "))

    over = traffic(500.0)
    assert "at 500 req/s (as given; vLLM's defaults miss p99_ttft_ms<=300 (p99 TTFT" in over
    # the SIMULATED figure with its band (issue 45 item 4): `(p99 TTFT 1450 ms (620-3200))`
    assert re.search(r"miss p99_ttft_ms<=300 \(p99 TTFT [\d.]+ ms \([\d.]+-[\d.]+\)\) there", over)
    assert "there on the simulator (SIMULATED): the baseline is infeasible" in over
    assert traffic(1.0).endswith("at 1 req/s (as given)")


def test_best_and_export_say_what_their_zero_is_once_the_baseline_was_confirmed() -> None:
    """The fourth round's leftover: after `--confirm` the baseline's row read a non-zero score
    while `best` said "the baseline scores 0"; 0 is the mean of its runs, and they say so."""
    from tuner.results.verdicts import zero_words
    from tuner.trial import TrialPoint, TrialRecord
    from tuner.trial.ranking import pooled

    metrics = {"p99_ttft_ms": 1000.0, "mean_tpot_ms": 50.0, "output_throughput": 1000.0}

    def trial(number: int, score: float, **kw: Any) -> TrialPoint:
        record = TrialRecord(metrics=metrics, score=score, reference_trial=0, **kw)
        return TrialPoint.measured_as(number, {"max-num-seqs": 64}, record)

    base, best = trial(0, 0.0, baseline=True), trial(1, -0.2)
    points = pooled([base, best, trial(2, 0.1, confirm_of=0)])
    assert points[0].score == pytest.approx(-0.05)  # the baseline's first run, as listed
    assert zero_words(points[1], points) == (
        "baseline = 0, the mean of its 2 runs: trial 0 alone scores -0.050"
    )
    assert zero_words(best, [base, best]) == "baseline = 0"
