"""One source for every count (issue 46, item 5): a planned study with trials stopped early,
ruled out on a prediction and refused by vLLM's rules is counted alike by `tuner trials`
and the report's header (`tuner.trial.outcome`), and no ruled-out or refused config is
counted as stopped early."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console
from test_predict_skip import _spec as skip_spec

from tuner import trial as tr
from tuner.results.report.page import _counts, trials_table
from tuner.results.views import print_trials_table, trials_frame
from tuner.run.loop import StudyLoop
from tuner.runners.plan import PlanRunner
from tuner.spec.study import StudySpec
from tuner.store.storage import Store

pytestmark = pytest.mark.slow  # a planned study of 8 trials: about 2 s of CPU on an idle box


def _spec(tokenizer: Path) -> StudySpec:
    """`test_predict_skip`'s study with early stopping on, a 4096-token context and chunked
    prefill searched (off with 1024 batched tokens: refused by vLLM's rules), 8 trials of 12
    prompts."""
    data = skip_spec(tokenizer, enabled=True).model_dump(mode="json", exclude_unset=True)
    data["engine"]["flags"]["max-model-len"] = 4096
    data["search_space"]["parameters"]["enable-chunked-prefill"] = {"type": "bool"}
    data["workload"]["num_prompts"] = 12
    data["budget"]["n_trials"] = 8
    return StudySpec.model_validate({**data, "name": "counts"})


@pytest.fixture(scope="module")
def planned(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[tr.TrialPoint]:
    spec = _spec(tiny_model_dir)
    store = Store(f"sqlite:///{tmp_path_factory.mktemp('counts')}/c.db")
    loop = StudyLoop(spec, store, PlanRunner(spec), prediction_skip=True)
    # hopeless (1 sequence at a time): launched, then stopped early by the SLO;
    # refused by vLLM's rules: 1024 batched tokens under a 4096-token context, not chunked
    loop.study.enqueue_trial({"max-num-seqs": 1, "max-num-batched-tokens": 8192})
    loop.study.enqueue_trial(
        {"max-num-seqs": 8, "max-num-batched-tokens": 1024, "enable-chunked-prefill": False}
    )
    loop.run()
    points = tr.read_all(store.load_study("counts-simulated").get_trials())
    store.close()
    return points


def test_the_report_counts_what_tuner_trials_counts(planned: list[tr.TrialPoint]) -> None:
    found = tr.tally(planned)
    assert found["stopped"] and found["ruled-out"] and found["refused"], found
    # a config never launched is not counted as stopped early
    assert found["stopped"] == sum(p.status == "pruned" and not p.record.ruled_out for p in planned)
    out = io.StringIO()
    print_trials_table(
        trials_frame(planned), Console(file=out, width=200), counts=tr.tally_line(planned)
    )
    text = " ".join(out.getvalue().split())
    shown = re.search(r"(\d+) trials: (.*)$", text)
    assert shown is not None and int(shown.group(1)) == len(planned)
    listed = {words: int(n) for n, words in re.findall(r"(\d+) ([^,]+)", shown.group(2))}
    assert listed == dict(_counts(planned))
    # each row's words are its count's
    rows = str(trials_table(planned, set()))
    assert rows.count(">stopped early (pruned)<") == found["stopped"]
    assert rows.count(">ruled out (never launched)<") == found["ruled-out"]
    assert rows.count(">refused (never launched)<") == found["refused"]
