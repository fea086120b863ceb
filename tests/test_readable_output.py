"""Numbers and logs people read, and `--traffic chat` on the chat endpoint (issue 34, items 6
and 7): one formatter, an interval that straddles an SLO says so, run logs whose lines stay
whole in a file, trial lists in words; chat traffic through the model's chat template."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
from results_fixtures import frozen

from tuner.results.sections import interval_lines
from tuner.run.progress import RichProgress, log_console
from tuner.scaffold.traffic import traffic, with_template
from tuner.spec.figures import figure, trials_words
from tuner.spec.slo import parse_slo, straddle_words
from tuner.trial import read
from tuner.workload.client import CHAT_ENDPOINT, request_body
from tuner.workload.request import BenchRequest

TINY = Path(__file__).resolve().parents[1] / ".cache" / "tiny-qwen2"


def test_one_formatter_reads_plain_decimals_for_any_number() -> None:
    # export and the report printed 1.993e+04 (CI 1.393e+04–2.429e+04) where tables print 19934
    assert figure(19934.3) == "19934" and figure(13930.6) == "13931"
    assert figure(np.float32(0.08033)) == "0.08033" and figure(np.int64(7)) == "7"
    assert figure(-0.19031, 3, sign=True) == "-0.190" and figure([1, 2]) == "[1, 2]"


def test_an_interval_that_straddles_an_slo_says_so() -> None:
    limits = parse_slo("p99_ttft_ms<=20000,mean_tpot_ms<=80")
    words = straddle_words("p99_ttft_ms", (13930.0, 24290.0), limits)
    assert words == "the interval straddles the SLO p99_ttft_ms<=20000"
    assert straddle_words("p99_ttft_ms", (13930.0, 19000.0), limits) == ""
    assert straddle_words("mean_tpot_ms", None, limits) == ""
    top = read(
        frozen(
            1,
            score=0.0,
            p99_ttft_ms=19934.3,
            p99_ttft_ms_ci=[13930.0, 24290.0],
            mean_tpot_ms=52.1,
            mean_tpot_ms_ci=[48.6, 56.2],
        )
    )
    (line,) = interval_lines(top, limits)
    assert line == (
        "95% intervals: p99 TTFT 13930–24290 ms (the interval straddles the SLO "
        "p99_ttft_ms<=20000), mean TPOT 48.6–56.2 ms"
    )


def test_a_run_log_in_a_file_keeps_every_line_whole() -> None:
    # rich hard-wrapped at 80 columns into a log file: `output 353.3 \ntok/s` broke grep
    out = io.StringIO()
    progress = RichProgress(log_console(out))
    params = {f"flag-number-{i}": 1000 + i for i in range(12)}  # a trial line of 200+ chars
    progress.trial(0, 3, params)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("trial 3: flag-number-0=1000 ") and "flag-number-11=1011" in lines[0]


def test_trial_lists_read_as_words() -> None:
    # "recovered interrupted trials: [0]" at the end of a run
    assert trials_words([0]) == "trial 0"
    assert trials_words([0, 3]) == "trials 0 and 3"
    assert trials_words([0, 3, 5]) == "trials 0, 3 and 5"


def test_chat_traffic_goes_to_the_chat_endpoint_through_the_models_template(
    tmp_path: Path,
) -> None:
    mix = with_template(traffic("chat", 4096, 4), TINY)
    assert mix.workload["endpoint"] == CHAT_ENDPOINT and not mix.notes
    # the body is vLLM's openai-chat backend's: the prompt as one user message
    req = BenchRequest("a random prompt of token ids", 6, 8, ignore_eos=True)
    body = json.loads(request_body(CHAT_ENDPOINT, "m", req))
    assert body["messages"] == [{"role": "user", "content": req.prompt}]
    assert body["max_completion_tokens"] == 8 and "prompt" not in body
    # a tokenizer that ships no template: vLLM would refuse every chat request
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "tokenizer_config.json").write_text("{}")
    plain = with_template(traffic("chat", 4096, 4), bare)
    assert plain.workload["endpoint"] == "/v1/completions"
    assert "has no chat template" in plain.notes[0]
